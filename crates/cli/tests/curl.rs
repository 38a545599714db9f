//! End-to-end with a real client: curl (Debian's, built with nghttp2;
//! `scripts/test` installs it when missing) talks HTTP/1.1, h2c with prior
//! knowledge, and TLS with ALPN h2 to `fulcrum serve`. A plain `cargo test`
//! ignores it; `scripts/test` installs curl and runs it, and run without curl
//! it fails, never skips.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{temp_dir, Fulcrum};

/// curl's `%{http_version} %{http_code}` for `args`, and the body.
fn curl(args: &[&str]) -> (String, String) {
    let out = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "20", "--write-out", "\n%{http_version} %{http_code}"])
        .args(args)
        .output()
        .expect("curl (scripts/test installs it)");
    assert!(out.status.success(), "curl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, summary) = text.rsplit_once('\n').unwrap();
    (summary.to_string(), body.to_string())
}

#[test]
#[ignore = "needs curl built with nghttp2 (scripts/test installs it)"]
fn curl_gets_answers_over_http11_h2c_and_tls_h2() {
    let b = fulcrum_load::Backends::start(fulcrum_load::BackendsConfig::fixed_delays(&[Duration::ZERO])).unwrap();
    let dir = temp_dir("curl-certs");
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    std::fs::write(dir.join("cert.pem"), cert.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), cert.key_pair.serialize_pem()).unwrap();
    let text = format!(
        "workers = 1\nadmin = \"127.0.0.1:0\"\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\nroutes = [{{ cluster = \"app\" }}]\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\ntls = {{ cert = \"{0}/cert.pem\", key = \"{0}/key.pem\" }}\n\
         routes = [{{ cluster = \"app\" }}]\n\n[[cluster]]\nname = \"app\"\nendpoints = [\"{1}\"]\n",
        dir.display(),
        b.addrs()[0]
    );
    let f = Fulcrum::serve("curl", &text);
    let plain = format!("http://{}/x", f.listen[0]);
    assert_eq!(curl(&["--http1.1", &plain]).0, "1.1 200");
    assert_eq!(curl(&["--http2-prior-knowledge", &plain]).0, "2 200");
    let port = f.listen[1].port().to_string();
    let resolve = format!("localhost:{port}:127.0.0.1");
    let cafile = dir.join("cert.pem");
    let tls = format!("https://localhost:{port}/x");
    assert_eq!(curl(&["--http2", "--cacert", cafile.to_str().unwrap(), "--resolve", &resolve, &tls]).0, "2 200");
    assert_eq!(curl(&["--http1.1", "--cacert", cafile.to_str().unwrap(), "--resolve", &resolve, &tls]).0, "1.1 200");
    // A request the proxy refuses itself comes back as such to a real client.
    assert_eq!(curl(&["--http1.1", "-H", "Host:", &plain]).0, "1.1 400");
    assert!(f.terminate().success());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
#[ignore = "needs curl built with nghttp2 (scripts/test installs it)"]
fn curl_keeps_the_sticky_cookie_in_its_jar_and_stays_on_one_endpoint() {
    let delays = [Duration::ZERO; 4];
    let b = fulcrum_load::Backends::start(fulcrum_load::BackendsConfig::fixed_delays(&delays)).unwrap();
    let endpoints: Vec<String> = b.addrs().iter().map(|a| format!("\"{a}\"")).collect();
    let text = format!(
        "workers = 2\nadmin = \"127.0.0.1:0\"\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\nroutes = [{{ cluster = \"app\" }}]\n\
         request_id = {{ response = true }}\n\n[[cluster]]\nname = \"app\"\nendpoints = [{}]\n\
         algorithm = {{ kind = \"maglev\" }}\nhash_key = {{ cookie = \"fsid\" }}\nsticky_cookie = {{ ttl = \"10m\" }}\n",
        endpoints.join(", ")
    );
    let f = Fulcrum::serve("curl-sticky", &text);
    let dir = temp_dir("curl-jar");
    let jar = dir.join("jar.txt");
    let jar = jar.to_str().unwrap();
    let url = format!("http://{}/", f.listen[0]);
    // Headers shown (`--dump-header -`) before the body.
    let headers = |args: &[&str]| {
        let (summary, out) =
            curl(&[&["--http1.1", "--dump-header", "-", "--cookie", jar, "--cookie-jar", jar], args].concat());
        assert_eq!(summary, "1.1 200", "{out}");
        out.to_ascii_lowercase()
    };
    let value = |head: &str, name: &str| head.lines().find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()));
    let first = headers(&[&url]);
    assert!(value(&first, "set-cookie:").is_some_and(|c| c.starts_with("fsid=")), "{first}");
    assert!(value(&first, "x-request-id:").is_some_and(|id| id.len() == 36), "{first}");
    let backend = value(&first, "x-fulcrum-backend:").unwrap();
    for _ in 0..10 {
        let next = headers(&[&url]);
        assert_eq!(value(&next, "x-fulcrum-backend:"), Some(backend.clone()), "{next}");
        assert_eq!(value(&next, "set-cookie:"), None, "the cookie is set once: {next}");
    }
    assert!(std::fs::read_to_string(jar).unwrap().contains("fsid"));
    assert!(f.terminate().success());
    let _ = std::fs::remove_dir_all(dir);
}
