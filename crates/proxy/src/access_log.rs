//! Access logs: one line per request, in a format string of named fields or
//! as JSON lines, written off the request path.
//!
//! The request path fills a plain [`Record`] (no server types in it, so
//! that any server front end can log through it) and hands it to the
//! listener's [`AccessLog`], which only puts it on a bounded channel. A
//! thread per log takes the queued records every [`PERIOD`], formats them
//! and writes them through a buffer; when the channel is full (a
//! slow disk, a blocked stdout), the record is dropped and counted
//! ([`ProxyStats::access_log_dropped`], exported as
//! `fulcrum_access_log_dropped_total`) rather than making the request wait.
//! The fields and the termination
//! flags follow what nginx's `log_format`, HAProxy's `option httplog` and
//! Envoy's access log offer; each is documented on [`Field`] and [`Flags`].

use std::fmt::Write as _;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use http::{Method, Version};

use crate::metrics::ProxyStats;

/// Records a log's channel holds before it drops new ones.
pub const QUEUE: usize = 64 * 1024;

/// How often the writer thread takes the queued records: a line is written
/// at most this long after its request ends.
pub const PERIOD: Duration = Duration::from_millis(50);

/// Where and how a listener logs, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLogConfig {
    /// Where lines go.
    pub target: Target,
    /// What a line looks like.
    pub format: Format,
}

/// Where log lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The proxy's standard output.
    Stdout,
    /// A file, created if missing and appended to.
    File(PathBuf),
}

/// What a log line looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    /// Text with `$field` (or `${field}`) replaced by the field's value.
    Text(Vec<Piece>),
    /// One JSON object per line with every field.
    Json,
}

/// A piece of a text format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Written as is.
    Literal(String),
    /// Replaced by the field's value (`-` when it has none).
    Field(Field),
}

/// The default text format.
pub const DEFAULT_FORMAT: &str = "$time $client \"$method $authority$path $protocol\" $status $bytes_in $bytes_out \
                                  $duration_ms $upstream_connect_ms $upstream_response_ms $upstream $cluster \
                                  $endpoint $retries $flags";

macro_rules! fields {
    ($($(#[doc = $doc:literal])* $variant:ident = $name:literal,)*) => {
        /// A field of a log line. Times are milliseconds with microsecond
        /// decimals; a value that does not apply is `-` (`null` in JSON).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Field {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Field {
            /// Every field, in the order JSON lines list them.
            pub const ALL: &'static [Field] = &[$(Field::$variant,)*];

            /// The field's name in formats and JSON.
            pub fn name(self) -> &'static str {
                match self {
                    $(Field::$variant => $name,)*
                }
            }

            /// `"name":`, the field's key in a JSON line.
            fn json_key(self) -> &'static str {
                match self {
                    $(Field::$variant => concat!("\"", $name, "\":"),)*
                }
            }
        }
    };
}

fields! {
    /// When the request arrived: RFC 3339, UTC, milliseconds.
    Time = "time",
    /// The client's address and port.
    Client = "client",
    /// The request method.
    Method = "method",
    /// The host the request was for (the target's authority, else `Host`).
    Authority = "authority",
    /// The request target's path and query.
    Path = "path",
    /// `HTTP/1.0`, `HTTP/1.1`, `HTTP/2.0` or `HTTP/3.0`.
    Protocol = "protocol",
    /// The status sent to the client.
    Status = "status",
    /// Request body bytes received from the client.
    BytesIn = "bytes_in",
    /// Response body bytes sent to the client (for a 101, none: the tunnel is not counted).
    BytesOut = "bytes_out",
    /// From the request's arrival to the end of its response body.
    DurationMs = "duration_ms",
    /// Time to connect to the upstream, when the last try opened a connection
    /// (`-` when it reused a pooled one, or none was made).
    UpstreamConnectMs = "upstream_connect_ms",
    /// From sending the last try to its response headers (connecting included).
    UpstreamResponseMs = "upstream_response_ms",
    /// The address of the endpoint of the last try.
    Upstream = "upstream",
    /// The cluster the request was routed to.
    Cluster = "cluster",
    /// The balancer's choice: the endpoint's id in its cluster (as in `/status`).
    Endpoint = "endpoint",
    /// Tries after the first.
    Retries = "retries",
    /// The `grpc-status` of a gRPC response (trailers, or a trailers-only head).
    GrpcStatus = "grpc_status",
    /// How the request ended, as [`Flags`] codes joined by `,` (`-` if normally).
    Flags = "flags",
    /// The subject of the client certificate the listener verified (mutual TLS).
    ClientCert = "client_cert",
    /// The request ID (the listener's `request_id` header, as received or as made).
    RequestId = "request_id",
    /// The W3C trace ID (32 hex digits) when the listener has `traceparent`.
    TraceId = "trace_id",
    /// The `name` of the route that matched.
    Route = "route",
}

impl std::str::FromStr for Field {
    type Err = String;

    fn from_str(name: &str) -> Result<Field, String> {
        Field::ALL.iter().copied().find(|f| f.name() == name).ok_or_else(|| {
            let known: Vec<&str> = Field::ALL.iter().map(|f| f.name()).collect();
            format!("unknown field `${name}` (known: {})", known.join(", "))
        })
    }
}

impl Format {
    /// Parse a text format ([`tokens`] has the syntax).
    pub fn parse(text: &str) -> Result<Format, String> {
        let pieces = tokens(text, field_char)?
            .into_iter()
            .map(|token| match token {
                Token::Literal(literal) => Ok(Piece::Literal(literal)),
                Token::Name("") => Err("`$` without a field name (write `$$` for a dollar sign)".to_string()),
                Token::Name(name) => name.parse().map(Piece::Field),
            })
            .collect::<Result<_, _>>()?;
        Ok(Format::Text(pieces))
    }
}

/// The characters of a variable's or a log field's name after `$`.
pub(crate) fn field_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'
}

/// A run of a `$name` template, as [`tokens`] splits it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Token<'a> {
    /// Text as written (`$$` already made a `$`).
    Literal(String),
    /// A name after `$` (possibly empty: the caller says what that means).
    Name(&'a str),
}

/// Split a template into literal text and names: `$name` runs over the
/// characters `name_char` accepts; `${name}` may be followed by such
/// characters; `$$` is a `$`. The one syntax of access-log formats, route
/// header values (names over `[a-z0-9_]`, [`field_char`]) and rewrite
/// replacements (regex group numbers and names).
pub(crate) fn tokens(text: &str, name_char: fn(char) -> bool) -> Result<Vec<Token<'_>>, String> {
    let mut out = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        literal.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        let (name, after) = if let Some(braced) = rest.strip_prefix('{') {
            let end = braced.find('}').ok_or("`${` without a closing `}`")?;
            (&braced[..end], &braced[end + 1..])
        } else if let Some(after) = rest.strip_prefix('$') {
            literal.push('$');
            rest = after;
            continue;
        } else {
            let end = rest.find(|c: char| !name_char(c));
            rest.split_at(end.unwrap_or(rest.len()))
        };
        if !literal.is_empty() {
            out.push(Token::Literal(std::mem::take(&mut literal)));
        }
        out.push(Token::Name(name));
        rest = after;
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        out.push(Token::Literal(literal));
    }
    Ok(out)
}

/// How a request ended, as short codes in the style of Envoy's response
/// flags (several may be set).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags(u16);

impl Flags {
    /// `NR`: no route matched (404).
    pub const NO_ROUTE: Flags = Flags(1);
    /// `UH`: the cluster had no endpoint to pick (503).
    pub const NO_HEALTHY_UPSTREAM: Flags = Flags(1 << 1);
    /// `UO`: a circuit breaker was open: `max_requests`, `max_connections`, `max_pending` (503).
    pub const UPSTREAM_OVERFLOW: Flags = Flags(1 << 2);
    /// `UF`: no connection could be made to the upstream (502).
    pub const UPSTREAM_CONNECT_FAILURE: Flags = Flags(1 << 3);
    /// `UC`: the upstream connection broke after the request was sent, or
    /// the response body broke while streaming.
    pub const UPSTREAM_RESET: Flags = Flags(1 << 4);
    /// `UT`: no response headers within the request timeout (504).
    pub const UPSTREAM_TIMEOUT: Flags = Flags(1 << 5);
    /// `URX`: the last try failed and the retry policy allowed no more (attempts, budget, deadline).
    pub const RETRIES_EXHAUSTED: Flags = Flags(1 << 6);
    /// `DC`: the client went away before the response body ended.
    pub const DOWNSTREAM_CLOSED: Flags = Flags(1 << 7);
    /// `BR`: the proxy refused the request as malformed (400).
    pub const BAD_REQUEST: Flags = Flags(1 << 8);
    /// `TL`: the request body was over `max_body_bytes` (413).
    pub const TOO_LARGE: Flags = Flags(1 << 9);
    /// `UP`: the connection was upgraded (101) and became a tunnel.
    pub const UPGRADED: Flags = Flags(1 << 10);
    /// `RL`: the route's rate limit refused the request (429).
    pub const RATE_LIMITED: Flags = Flags(1 << 11);

    const CODES: [(Flags, &'static str); 12] = [
        (Flags::NO_ROUTE, "NR"),
        (Flags::NO_HEALTHY_UPSTREAM, "UH"),
        (Flags::UPSTREAM_OVERFLOW, "UO"),
        (Flags::UPSTREAM_CONNECT_FAILURE, "UF"),
        (Flags::UPSTREAM_RESET, "UC"),
        (Flags::UPSTREAM_TIMEOUT, "UT"),
        (Flags::RETRIES_EXHAUSTED, "URX"),
        (Flags::DOWNSTREAM_CLOSED, "DC"),
        (Flags::BAD_REQUEST, "BR"),
        (Flags::TOO_LARGE, "TL"),
        (Flags::UPGRADED, "UP"),
        (Flags::RATE_LIMITED, "RL"),
    ];

    /// Add `other`'s flags.
    pub fn set(&mut self, other: Flags) {
        self.0 |= other.0;
    }

    /// Whether every flag of `other` is set.
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    fn write(self, out: &mut String) {
        if self.0 == 0 {
            out.push('-');
            return;
        }
        let mut first = true;
        for (flag, code) in Flags::CODES {
            if self.contains(flag) {
                if !first {
                    out.push(',');
                }
                out.push_str(code);
                first = false;
            }
        }
    }
}

/// One request, as logged. Plain data: filled by the request path, formatted
/// by the log's thread.
#[derive(Debug, Clone)]
pub struct Record {
    /// When the request arrived.
    pub time: SystemTime,
    /// The client.
    pub client: SocketAddr,
    /// Method.
    pub method: Method,
    /// The host the request was for, if it named one.
    pub authority: Option<String>,
    /// Path and query.
    pub path: String,
    /// The client's HTTP version.
    pub protocol: Version,
    /// Status sent to the client.
    pub status: u16,
    /// Request body bytes received.
    pub bytes_in: u64,
    /// Response body bytes sent.
    pub bytes_out: u64,
    /// Arrival to the end of the response body.
    pub duration: Duration,
    /// The routed cluster's name.
    pub cluster: Option<String>,
    /// What happened upstream, and how the request ended.
    pub trace: Trace,
    /// A gRPC response's status.
    pub grpc_status: Option<u32>,
    /// The subject of the client certificate a mutual-TLS listener verified.
    pub client_cert: Option<std::sync::Arc<str>>,
    /// The request ID, when the listener has them.
    pub request_id: Option<String>,
    /// The trace ID, when the listener propagates trace context.
    pub trace_id: Option<String>,
}

/// What the request path learns about a request's routing, tries and end:
/// filled as it goes, read into a [`Record`]. Only a request that will be
/// logged has one; without an access log the path skips this bookkeeping.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// The matched route's name.
    pub route: Option<std::sync::Arc<str>>,
    /// The routed cluster, by index in the worker's routing.
    pub cluster: Option<usize>,
    /// The last try's endpoint address.
    pub addr: Option<SocketAddr>,
    /// The last try's endpoint id.
    pub endpoint: Option<u64>,
    /// Tries after the first.
    pub retries: u32,
    /// The last try's connect time, if it opened a connection.
    pub connect: Option<Duration>,
    /// The last try's time to response headers.
    pub response: Option<Duration>,
    /// How the request ended, so far.
    pub flags: Flags,
}

impl Trace {
    /// A try goes to `pick`.
    pub fn picked(&mut self, addr: SocketAddr, endpoint: u64) {
        self.addr = Some(addr);
        self.endpoint = Some(endpoint);
    }
}

/// `n` in decimal: the digits straight into `out`, without `fmt`'s
/// machinery (a formatter, padding checks, a call per piece), which was most
/// of a line's cost.
fn decimal(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // One reservation for the digits, and no UTF-8 check of them.
    out.extend(digits[at..].iter().map(|&d| char::from(d)));
}

fn ms(out: &mut String, d: Option<Duration>) {
    match d {
        Some(d) => {
            decimal(out, d.as_millis() as u64);
            let micros = d.subsec_micros() % 1000;
            out.push('.');
            out.push(char::from(b'0' + (micros / 100) as u8));
            out.push(char::from(b'0' + (micros / 10 % 10) as u8));
            out.push(char::from(b'0' + (micros % 10) as u8));
        }
        None => out.push('-'),
    }
}

fn opt(out: &mut String, value: Option<u64>) {
    match value {
        Some(v) => decimal(out, v),
        None => out.push('-'),
    }
}

/// `addr` as `Display` writes it (`a.b.c.d:port`, `[v6]:port`); IPv4 by
/// hand, being the common case and costly through `fmt`.
fn socket_addr(out: &mut String, addr: SocketAddr) {
    match addr {
        SocketAddr::V4(v4) => {
            for (i, octet) in v4.ip().octets().into_iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                decimal(out, octet.into());
            }
            out.push(':');
            decimal(out, v4.port().into());
        }
        SocketAddr::V6(_) => {
            let _ = write!(out, "{addr}");
        }
    }
}

/// Push `text` in runs of the bytes `keep` accepts, calling `escape` for
/// each other byte (a push per run, not per character). `keep` must accept
/// every non-ASCII byte or none, so that runs are whole characters.
fn escape_runs(out: &mut String, text: &str, keep: impl Fn(u8) -> bool, mut escape: impl FnMut(&mut String, u8)) {
    let bytes = text.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if !keep(b) {
            // A kept byte before `i` is ASCII: `start..i` is then whole characters.
            if start < i {
                out.push_str(&text[start..i]);
            }
            escape(out, b);
            start = i + 1;
        }
    }
    out.push_str(&text[start..]);
}

/// Client-controlled text with `"`, `\`, control and non-ASCII bytes
/// escaped as `\xHH`, so that a line stays one line and fields stay apart.
fn escaped(out: &mut String, text: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    escape_runs(
        out,
        text,
        |b| b.is_ascii_graphic() && b != b'"' && b != b'\\' || b == b' ',
        |out, b| {
            out.push_str("\\x");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        },
    );
}

/// `text` as a JSON string (RFC 8259 §7: `"`, `\` and control characters escaped).
fn json_string(out: &mut String, text: &str) {
    out.push('"');
    escape_runs(
        out,
        text,
        |b| b >= 0x20 && b != b'"' && b != b'\\' && b != 0x7f,
        |out, b| match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            _ => {
                let _ = write!(out, "\\u{b:04x}");
            }
        },
    );
    out.push('"');
}

fn protocol(v: Version) -> &'static str {
    match v {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

impl Field {
    /// Whether JSON lines give the field as a number.
    fn numeric(self) -> bool {
        use Field::*;
        matches!(
            self,
            Status
                | BytesIn
                | BytesOut
                | DurationMs
                | UpstreamConnectMs
                | UpstreamResponseMs
                | Endpoint
                | Retries
                | GrpcStatus
        )
    }
}

impl Record {
    /// Whether `field` has no value (`-` in text, `null` in JSON).
    fn absent(&self, field: Field) -> bool {
        let up = &self.trace;
        match field {
            Field::Authority => self.authority.is_none(),
            Field::UpstreamConnectMs => up.connect.is_none(),
            Field::UpstreamResponseMs => up.response.is_none(),
            Field::Upstream => up.addr.is_none(),
            Field::Cluster => self.cluster.is_none(),
            Field::Endpoint => up.endpoint.is_none(),
            Field::GrpcStatus => self.grpc_status.is_none(),
            Field::Flags => up.flags == Flags::default(),
            Field::ClientCert => self.client_cert.is_none(),
            Field::RequestId => self.request_id.is_none(),
            Field::TraceId => self.trace_id.is_none(),
            Field::Route => up.route.is_none(),
            _ => false,
        }
    }

    /// The text of a field that the client or the configuration chose, as it
    /// came (JSON escapes it by its own rules).
    fn free_text(&self, field: Field) -> Option<&str> {
        match field {
            Field::Method => Some(self.method.as_str()),
            Field::Authority => self.authority.as_deref(),
            Field::Path => Some(&self.path),
            Field::Cluster => self.cluster.as_deref(),
            Field::ClientCert => self.client_cert.as_deref(),
            Field::RequestId => self.request_id.as_deref(),
            Field::Route => self.trace.route.as_deref(),
            _ => None,
        }
    }

    /// Append `field`'s text to `out`.
    fn write_field(&self, field: Field, out: &mut String) {
        let up = &self.trace;
        match field {
            Field::Time => {
                let _ = write!(out, "{}", humantime::format_rfc3339_millis(self.time));
            }
            Field::Client => socket_addr(out, self.client),
            Field::Method => escaped(out, self.method.as_str()),
            Field::Authority => match &self.authority {
                Some(a) => escaped(out, a),
                None => out.push('-'),
            },
            Field::Path => escaped(out, &self.path),
            Field::Protocol => out.push_str(protocol(self.protocol)),
            Field::Status => decimal(out, self.status.into()),
            Field::BytesIn => decimal(out, self.bytes_in),
            Field::BytesOut => decimal(out, self.bytes_out),
            Field::DurationMs => ms(out, Some(self.duration)),
            Field::UpstreamConnectMs => ms(out, up.connect),
            Field::UpstreamResponseMs => ms(out, up.response),
            Field::Upstream => match up.addr {
                Some(addr) => socket_addr(out, addr),
                None => out.push('-'),
            },
            Field::Cluster => out.push_str(self.cluster.as_deref().unwrap_or("-")),
            Field::Endpoint => opt(out, up.endpoint),
            Field::Retries => decimal(out, up.retries.into()),
            Field::GrpcStatus => opt(out, self.grpc_status.map(u64::from)),
            Field::Flags => up.flags.write(out),
            Field::ClientCert => match &self.client_cert {
                Some(subject) => escaped(out, subject),
                None => out.push('-'),
            },
            Field::RequestId => match &self.request_id {
                Some(id) => escaped(out, id),
                None => out.push('-'),
            },
            Field::TraceId => out.push_str(self.trace_id.as_deref().unwrap_or("-")),
            Field::Route => match &up.route {
                Some(name) => escaped(out, name),
                None => out.push('-'),
            },
        }
    }

    /// The record as one line (with its newline) in `format`.
    pub fn line(&self, format: &Format, out: &mut String) {
        match format {
            Format::Text(pieces) => {
                for piece in pieces {
                    match piece {
                        Piece::Literal(text) => out.push_str(text),
                        Piece::Field(field) => self.write_field(*field, out),
                    }
                }
            }
            Format::Json => {
                // Formatted on the writer thread for every line: no allocation,
                // and each value written in place.
                for (i, &field) in Field::ALL.iter().enumerate() {
                    out.push_str(if i == 0 { "{" } else { "," });
                    out.push_str(field.json_key());
                    if self.absent(field) {
                        out.push_str("null");
                    } else if field.numeric() {
                        self.write_field(field, out);
                    } else if let Some(text) = self.free_text(field) {
                        json_string(out, text);
                    } else {
                        // The proxy's own text (times, addresses, codes): nothing to escape.
                        out.push('"');
                        self.write_field(field, out);
                        out.push('"');
                    }
                }
                out.push('}');
            }
        }
        out.push('\n');
    }
}

/// A listener's log: where the request path sends records. Cloned into
/// every worker.
#[derive(Debug, Clone)]
pub struct AccessLog {
    /// Boxed records: a slot is a pointer, not a whole record.
    queue: SyncSender<Box<Record>>,
    /// Where dropped records are counted.
    stats: Arc<ProxyStats>,
}

impl AccessLog {
    /// Open `config`'s target and start its writer thread, which ends once
    /// every clone of the log is dropped and the queue is written out.
    pub fn start(
        config: &AccessLogConfig,
        name: String,
        stats: Arc<ProxyStats>,
    ) -> std::io::Result<(AccessLog, JoinHandle<()>)> {
        let out: Box<dyn Write + Send> = match &config.target {
            Target::Stdout => Box::new(std::io::stdout()),
            Target::File(path) => Box::new(std::fs::OpenOptions::new().create(true).append(true).open(path)?),
        };
        let (log, queue) = AccessLog::channel(QUEUE, stats);
        let format = config.format.clone();
        let thread = std::thread::Builder::new().name(name).spawn(move || write_lines(&queue, &format, out))?;
        Ok((log, thread))
    }

    fn channel(capacity: usize, stats: Arc<ProxyStats>) -> (AccessLog, Receiver<Box<Record>>) {
        let (queue, rx) = std::sync::mpsc::sync_channel(capacity);
        (AccessLog { queue, stats }, rx)
    }

    /// Queue `record` for writing; if the queue is full, drop and count it.
    pub fn log(&self, record: Box<Record>) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.queue.try_send(record) {
            self.stats.access_log_dropped.fetch_add(1, Relaxed);
        }
    }
}

/// The writer thread: every [`PERIOD`], take what the queue holds, format
/// it into a buffer and flush. It polls rather than waits on the queue, so
/// that a request's `try_send` never has a sleeping reader to wake (a
/// futex call per request), and lines go out in large writes.
fn write_lines(queue: &Receiver<Box<Record>>, format: &Format, out: Box<dyn Write + Send>) {
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, out);
    let mut line = String::with_capacity(256);
    let mut failed = false;
    loop {
        let mut taken = 0;
        let open = loop {
            match queue.try_recv() {
                Ok(record) => {
                    line.clear();
                    record.line(format, &mut line);
                    if let Err(e) = out.write_all(line.as_bytes()) {
                        report(&mut failed, &e);
                    }
                    taken += 1;
                }
                Err(TryRecvError::Empty) => break true,
                Err(TryRecvError::Disconnected) => break false,
            }
        };
        if taken > 0 || !open {
            if let Err(e) = out.flush() {
                report(&mut failed, &e);
            }
        }
        if !open {
            return;
        }
        // A queue that filled a quarter in one period is drained again at once.
        if taken < QUEUE / 4 {
            std::thread::sleep(PERIOD);
        }
    }
}

/// Say once that the log cannot be written (a full disk should not flood stderr).
fn report(failed: &mut bool, e: &std::io::Error) {
    if !*failed {
        eprintln!("fulcrum: access log: cannot write: {e} (further errors are not reported)");
        *failed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        Record {
            time: SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
            client: "127.0.0.1:5000".parse().unwrap(),
            method: Method::GET,
            authority: Some("a.test".into()),
            path: "/x?y=\"1\"".into(),
            protocol: Version::HTTP_11,
            status: 502,
            bytes_in: 0,
            bytes_out: 37,
            duration: Duration::from_micros(12_345),
            cluster: Some("web".into()),
            trace: Trace {
                route: Some("api\"v2".into()),
                cluster: Some(0),
                addr: Some("127.0.0.1:9001".parse().unwrap()),
                endpoint: Some(3),
                retries: 2,
                connect: None,
                response: Some(Duration::from_micros(1_002)),
                flags: Flags::UPSTREAM_RESET,
            },
            grpc_status: None,
            client_cert: None,
            request_id: Some("r\"1".into()),
            trace_id: None,
        }
    }

    #[test]
    fn the_default_format_writes_every_field() {
        let Format::Text(_) = Format::parse(DEFAULT_FORMAT).unwrap() else { panic!() };
        let mut r = record();
        r.trace.flags.set(Flags::RETRIES_EXHAUSTED);
        let mut line = String::new();
        r.line(&Format::parse(DEFAULT_FORMAT).unwrap(), &mut line);
        assert_eq!(
            line,
            "2023-11-14T22:13:20.123Z 127.0.0.1:5000 \"GET a.test/x?y=\\x221\\x22 HTTP/1.1\" 502 0 37 12.345 - 1.002 \
             127.0.0.1:9001 web 3 2 UC,URX\n"
        );
    }

    #[test]
    fn formats_parse_braces_and_dollars_and_reject_unknown_fields() {
        let f = Format::parse("${status}x $$ $retries").unwrap();
        let mut line = String::new();
        record().line(&f, &mut line);
        assert_eq!(line, "502x $ 2\n");
        line.clear();
        record().line(&Format::parse("$request_id $trace_id $route").unwrap(), &mut line);
        assert_eq!(line, "r\\x221 - api\\x22v2\n");
        assert!(Format::parse("$stauts").unwrap_err().contains("stauts"));
        assert!(Format::parse("a $ b").is_err());
        assert!(Format::parse("${status").is_err());
    }

    #[test]
    fn json_lines_have_every_field_with_nulls_for_none() {
        let mut line = String::new();
        record().line(&Format::Json, &mut line);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v.as_object().unwrap().len(), Field::ALL.len());
        assert_eq!(v["status"], 502);
        assert_eq!(v["path"], "/x?y=\"1\"");
        assert_eq!(v["duration_ms"], 12.345);
        assert_eq!(v["upstream_connect_ms"], serde_json::Value::Null);
        assert_eq!(v["grpc_status"], serde_json::Value::Null);
        assert_eq!(v["flags"], "UC");
        assert_eq!(v["cluster"], "web");
        assert_eq!((&v["request_id"], &v["trace_id"]), (&serde_json::json!("r\"1"), &serde_json::Value::Null));
        assert_eq!(v["route"], "api\"v2");
        assert_eq!(v["time"], "2023-11-14T22:13:20.123Z");
        let mut odd = record();
        odd.path = "/a\"b\\c\u{1}d\u{e9}".into();
        line.clear();
        odd.line(&Format::Json, &mut line);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["path"], "/a\"b\\c\u{1}d\u{e9}");
    }

    #[test]
    fn hand_written_numbers_addresses_and_escapes_match_display() {
        let mut out = String::new();
        for n in [0, 7, 10, 999, 1_000, u64::from(u32::MAX), u64::MAX] {
            out.clear();
            decimal(&mut out, n);
            assert_eq!(out, n.to_string());
        }
        for addr in ["0.0.0.0:0", "255.255.255.255:65535", "10.0.12.3:8080", "[::1]:443", "[fe80::1%2]:80"] {
            let addr: SocketAddr = addr.parse().unwrap();
            out.clear();
            socket_addr(&mut out, addr);
            assert_eq!(out, addr.to_string());
        }
        for d in [0, 999, 1_000, 1_234_567, 86_400_000_001] {
            let d = Duration::from_micros(d);
            out.clear();
            ms(&mut out, Some(d));
            assert_eq!(out, format!("{}.{:03}", d.as_millis(), d.subsec_micros() % 1000));
        }
        out.clear();
        escaped(&mut out, "é\"a\u{7f}\\ b\n");
        assert_eq!(out, "\\xC3\\xA9\\x22a\\x7F\\x5C b\\x0A");
        out.clear();
        json_string(&mut out, "é\"\u{7f}\\\u{1f}x");
        assert_eq!(out, "\"é\\\"\\u007f\\\\\\u001fx\"");
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_waiting() {
        let stats = Arc::new(ProxyStats::default());
        let (log, rx) = AccessLog::channel(2, stats.clone());
        for _ in 0..5 {
            log.log(Box::new(record()));
        }
        assert_eq!(stats.access_log_dropped.load(Relaxed), 3);
        assert_eq!(rx.try_iter().count(), 2);
    }
}
