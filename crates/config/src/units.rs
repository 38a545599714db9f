//! The one syntax of durations and sizes in every configuration file and
//! scenario.
//!
//! A **duration** is a string of one or more `<number><unit>` terms, spaces
//! allowed between them, added up: `"250us"`, `"5ms"`, `"1.5s"`,
//! `"1m 30s"`. Units: `ns` (`nsec`), `us` (`µs`, `usec`), `ms` (`msec`),
//! `s` (`sec`, `second(s)`), `m` (`min`, `minute(s)`), `h` (`hr`,
//! `hour(s)`), `d` (`day(s)`), `w` (`week(s)`). A number with no unit is
//! rejected, except `"0"`. The grammar is `humantime`'s, read
//! here only, so that the proxy, both simulators and the command line
//! accept the same text.
//!
//! A **size** is an integer number of bytes (`65536`) or a string with a
//! unit: `"64KiB"`, `"1.5MiB"`, `"9000B"`, `"10kB"`. `KiB`, `MiB`, `GiB`
//! and `TiB` are powers of 1024; `kB` (or `KB`), `MB`, `GB` and `TB`
//! powers of 1000. A fraction is allowed when the result is a whole number
//! of bytes.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use fulcrum_base::Nanos;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serializer};

/// Parse a duration (see the module documentation).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration ({e}); write e.g. 250us, 5ms, 1.5s"))
}

/// Parse a duration into integer nanoseconds; longer than 584 years is an error.
pub fn parse_nanos(text: &str) -> Result<Nanos, String> {
    let d = parse_duration(text)?;
    Nanos::try_from(d.as_nanos()).map_err(|_| format!("{:?} is too long (at most 584 years)", text.trim()))
}

/// Parse a size in bytes written as text (see the module documentation).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let s = text.trim();
    let bad = |why: &str| format!("{s:?} is not a size ({why}); write bytes, or e.g. 64KiB, 1.5MiB, 10kB");
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, unit) = (&s[..split], s[split..].trim_start());
    let scale: u64 = match unit {
        "" | "B" => 1,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return Err(bad(&format!("unknown unit {unit:?}"))),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(bad("no number"));
    }
    let too_large = || bad("too large");
    let whole: u64 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| too_large())? };
    let mut bytes = whole.checked_mul(scale).ok_or_else(too_large)?;
    if !fraction.is_empty() {
        // digits / 10^len of the unit, exactly: u128 holds 38 digits.
        let digits: u128 = fraction.parse().map_err(|_| bad("too many digits"))?;
        let denominator = 10u128.checked_pow(fraction.len() as u32).ok_or_else(|| bad("too many digits"))?;
        let scaled = digits * u128::from(scale);
        if !scaled.is_multiple_of(denominator) {
            return Err(bad("not a whole number of bytes"));
        }
        let part = u64::try_from(scaled / denominator).map_err(|_| too_large())?;
        bytes = bytes.checked_add(part).ok_or_else(too_large)?;
    }
    Ok(bytes)
}

/// A duration in integer nanoseconds, written as text (`"10us"`, `"5ms"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dur(pub Nanos);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Dur, D::Error> {
        let s = String::deserialize(d)?;
        parse_nanos(&s).map(Dur).map_err(de::Error::custom)
    }
}

/// `#[serde(with = "fulcrum_config::nanos")]` on a [`Nanos`] field: read
/// as a duration's text ([`parse_nanos`]), written as `"…ns"`.
pub mod nanos {
    use super::*;

    /// Serde's `deserialize_with`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Nanos, D::Error> {
        Dur::deserialize(d).map(|d| d.0)
    }

    /// Serde's `serialize_with`.
    pub fn serialize<S: Serializer>(value: &Nanos, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{value}ns"))
    }
}

/// `#[serde(with = "fulcrum_config::duration")]` on a [`Duration`] or an
/// `Option<Duration>` field: read with [`parse_duration`], written as
/// humantime formats it (`"1s 500ms"`).
pub mod duration {
    use super::*;

    /// What the adapter reads and writes: a duration, or an optional one.
    pub trait Field: Sized {
        #[doc(hidden)]
        fn read<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
        #[doc(hidden)]
        fn write<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error>;
    }

    /// A [`Duration`] read from its text.
    struct Text(Duration);

    impl<'de> Deserialize<'de> for Text {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Text, D::Error> {
            let s = String::deserialize(d)?;
            parse_duration(&s).map(Text).map_err(de::Error::custom)
        }
    }

    impl Field for Duration {
        fn read<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            Text::deserialize(d).map(|t| t.0)
        }
        fn write<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(&humantime::format_duration(*self).to_string())
        }
    }

    impl Field for Option<Duration> {
        fn read<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            Option::<Text>::deserialize(d).map(|t| t.map(|t| t.0))
        }
        fn write<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match self {
                Some(d) => s.serialize_some(&humantime::format_duration(*d).to_string()),
                None => s.serialize_none(),
            }
        }
    }

    /// Serde's `deserialize_with`.
    pub fn deserialize<'de, D: Deserializer<'de>, T: Field>(d: D) -> Result<T, D::Error> {
        T::read(d)
    }

    /// Serde's `serialize_with`.
    pub fn serialize<S: Serializer, T: Field>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        value.write(s)
    }
}

/// `#[serde(with = "fulcrum_config::size")]` on an integer field (`u64`,
/// `usize`, `u32`, or an `Option` of one) of a type that is only read: an
/// integer of bytes or a string read with [`parse_size`].
pub mod size {
    use super::*;

    /// What the adapter reads.
    pub trait Field: Sized {
        #[doc(hidden)]
        fn read<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
    }

    /// A size in bytes, from an integer or a string, converted to `T`.
    struct Bytes<T>(T);

    struct BytesVisitor<T>(PhantomData<T>);

    impl<T: TryFrom<u64>> BytesVisitor<T> {
        fn fit<E: de::Error>(bytes: u64) -> Result<Bytes<T>, E> {
            T::try_from(bytes).map(Bytes).map_err(|_| E::custom(format!("{bytes} bytes is too large here")))
        }
    }

    impl<T: TryFrom<u64>> Visitor<'_> for BytesVisitor<T> {
        type Value = Bytes<T>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a size: bytes (an integer ≥ 0) or a string such as \"64KiB\"")
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Bytes<T>, E> {
            Self::fit(v)
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Bytes<T>, E> {
            let v = u64::try_from(v).map_err(|_| E::custom(format!("{v} is not a size: bytes must be ≥ 0")))?;
            Self::fit(v)
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Bytes<T>, E> {
            Self::fit(parse_size(v).map_err(E::custom)?)
        }
    }

    impl<'de, T: TryFrom<u64>> Deserialize<'de> for Bytes<T> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(BytesVisitor(PhantomData))
        }
    }

    macro_rules! field {
        ($($t:ty),*) => {$(
            impl Field for $t {
                fn read<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                    Bytes::<$t>::deserialize(d).map(|b| b.0)
                }
            }

            impl Field for Option<$t> {
                fn read<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                    Option::<Bytes<$t>>::deserialize(d).map(|b| b.map(|b| b.0))
                }
            }
        )*};
    }

    field!(u64, usize, u32);

    /// Serde's `deserialize_with`.
    pub fn deserialize<'de, D: Deserializer<'de>, T: Field>(d: D) -> Result<T, D::Error> {
        T::read(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_every_unit_and_combination() {
        let ns = |s: &str| parse_nanos(s).unwrap();
        assert_eq!(ns("10ns"), 10);
        assert_eq!(ns("10us"), 10_000);
        assert_eq!(ns("10µs"), 10_000);
        assert_eq!(ns("5ms"), 5_000_000);
        assert_eq!(ns(" 500ms "), 500_000_000);
        assert_eq!(ns("1.5s"), 1_500_000_000);
        assert_eq!(ns("1m 30s"), 90_000_000_000);
        assert_eq!(ns("2h"), 7_200_000_000_000);
        assert_eq!(ns("0s"), 0);
        assert_eq!(ns("0"), 0);
        for bad in ["", "5", "10 parsecs", "ms", "-1s", "1e3ms"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert!(parse_nanos("1000y").unwrap_err().contains("too long"));
    }

    #[test]
    fn sizes_in_bytes_and_units() {
        let b = |s: &str| parse_size(s).unwrap();
        assert_eq!(b("65536"), 65_536);
        assert_eq!(b("64KiB"), 65_536);
        assert_eq!(b("64 KiB"), 65_536);
        assert_eq!(b("1.5MiB"), 1_572_864);
        assert_eq!(b("10kB"), 10_000);
        assert_eq!(b("10KB"), 10_000);
        assert_eq!(b("9000B"), 9_000);
        assert_eq!(b("2GB"), 2_000_000_000);
        assert_eq!(b(".5KiB"), 512);
        for bad in ["", "KiB", "1.5B", "1.2.3KiB", "64 kib", "-1", "1e3", "99999999999TiB", "1.x"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Doc {
        #[serde(with = "duration")]
        d: Duration,
        #[serde(default, with = "duration")]
        o: Option<Duration>,
        #[serde(with = "size")]
        s: u64,
        #[serde(default, with = "size")]
        t: Option<usize>,
        n: Dur,
    }

    #[test]
    fn serde_adapters_read_and_write() {
        let doc: Doc = toml::from_str("d = \"1.5s\"\ns = \"4KiB\"\nt = 7\nn = \"3us\"").unwrap();
        assert_eq!(doc, Doc { d: Duration::from_millis(1500), o: None, s: 4096, t: Some(7), n: Dur(3_000) });
        #[derive(serde::Serialize)]
        struct Out {
            #[serde(with = "duration")]
            d: Duration,
            #[serde(with = "duration")]
            o: Option<Duration>,
        }
        let text = toml::to_string(&Out { d: doc.d, o: Some(Duration::from_micros(7)) }).unwrap();
        assert_eq!(text, "d = \"1s 500ms\"\no = \"7us\"\n");
        let e = toml::from_str::<Doc>("d = \"5 parsecs\"\ns = 1\nn = \"1s\"").unwrap_err();
        assert!(e.message().contains("parsecs") && e.span().is_some(), "{e}");
        let e = toml::from_str::<Doc>("d = \"5s\"\ns = -4\nn = \"1s\"").unwrap_err();
        assert!(e.message().contains("≥ 0"), "{e}");
        let e = toml::from_str::<Doc>("d = 5\ns = 1\nn = \"1s\"").unwrap_err();
        assert!(e.message().contains("string"), "{e}");
    }
}
