//! End-to-end: access logs of the real `fulcrum serve`, in the default
//! text format and as JSON lines, for a plain request, a request with a
//! body, a retried request, a connect failure (502), a timeout (504) and a
//! request with no route (404).

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{closed_port, get, send, temp_dir, Fulcrum};
use fulcrum_load::{Backends, BackendsConfig};

/// The first `n` lines of `path`, waiting for the writer thread to write them.
fn lines(path: &Path, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(Instant::now() < deadline, "{} has {} lines, expected {n}:\n{text}", path.display(), lines.len());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Two listeners with the same routes, one logging text and one JSON, in
/// front of `app` (a closed port and a working backend: round robin makes
/// one of two requests connect to the closed port first and retry),
/// `dead` (a closed port only) and `slow` (answers after 2 s, timeout 200 ms).
fn config(dir: &Path, fast: SocketAddr, slow: SocketAddr) -> String {
    let dead = closed_port();
    let routes = r#"routes = [
  { name = "apps", path_prefix = "/app", cluster = "app" },
  { path_prefix = "/dead", cluster = "dead" },
  { path_prefix = "/slow", cluster = "slow" },
]"#;
    format!(
        r#"admin = "127.0.0.1:0"
workers = 1

[[listener]]
listen = "127.0.0.1:0"
{routes}
access_log = {{ path = "{text}" }}

[[listener]]
listen = "127.0.0.1:0"
{routes}
access_log = {{ path = "{json}", json = true }}

[[cluster]]
name = "app"
endpoints = ["{dead}", "{fast}"]
retries = {{ attempts = 2, budget = false }}

[[cluster]]
name = "dead"
endpoints = ["{dead}"]
retries = {{ attempts = 1 }}

[[cluster]]
name = "slow"
endpoints = ["{slow}"]
request_timeout = "200ms"
"#,
        text = dir.join("text.log").display(),
        json = dir.join("json.log").display(),
    )
}

/// The requests, the same on each listener; returns the 200 responses' body length.
fn requests(addr: SocketAddr) -> usize {
    let mut body_len = 0;
    for _ in 0..2 {
        let r = get(addr, "app.test", "/app/x?q=1", "");
        assert_eq!(r.status, 200, "{r:?}");
        body_len = r.body.len();
    }
    assert_eq!(body_len, 123);
    let r =
        send(addr, b"POST /app/post HTTP/1.1\r\nHost: app.test\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(get(addr, "app.test", "/dead", "").status, 502);
    assert_eq!(get(addr, "app.test", "/slow", "").status, 504);
    assert_eq!(get(addr, "app.test", "/nowhere", "").status, 404);
    body_len
}

#[test]
fn requests_are_logged_as_text_and_as_json_lines() {
    let dir = temp_dir("access-log");
    let mut spec = BackendsConfig::fixed_delays(&[Duration::ZERO, Duration::from_secs(2)]);
    spec.backends[0].body_bytes = 123;
    let backends = Backends::start(spec).unwrap();
    let (fast, slow) = (backends.addrs()[0], backends.addrs()[1]);
    let f = Fulcrum::serve("access-log", &config(&dir, fast, slow));
    let body_len = requests(f.listen[0]);
    requests(f.listen[1]);

    // Text: the default format, fields in their documented order:
    // time client "method authority+path protocol" status bytes_in bytes_out
    // duration_ms upstream_connect_ms upstream_response_ms upstream cluster
    // endpoint retries flags.
    let text = lines(&dir.join("text.log"), 6);
    let fields: Vec<Vec<String>> = text
        .iter()
        .map(|l| {
            let (head, rest) = l.split_once(" \"").unwrap();
            let (request, tail) = rest.split_once("\" ").unwrap();
            head.split(' ').chain(std::iter::once(request)).chain(tail.split(' ')).map(str::to_string).collect()
        })
        .collect();
    for (line, f) in text.iter().zip(&fields) {
        assert_eq!(f.len(), 14, "{line}");
        assert!(f[0].ends_with('Z') && f[0].contains('T'), "RFC 3339 time: {line}");
        assert!(f[1].starts_with("127.0.0.1:"), "{line}");
        assert!(f[6].parse::<f64>().is_ok(), "duration_ms: {line}");
    }
    let gets: Vec<&Vec<String>> = fields.iter().filter(|f| f[2] == "GET app.test/app/x?q=1 HTTP/1.1").collect();
    assert_eq!(gets.len(), 2, "{text:#?}");
    for f in &gets {
        assert_eq!((f[3].as_str(), f[4].as_str(), f[5].clone()), ("200", "0", body_len.to_string()), "{f:?}");
        assert!(f[8].parse::<f64>().is_ok(), "upstream_response_ms: {f:?}");
        assert_eq!((f[9].as_str(), f[10].as_str()), (fast.to_string().as_str(), "app"), "{f:?}");
    }
    // One of the two first went to the closed port: retried, no flags.
    let retried = fields.iter().filter(|f| f[3] == "200" && f[12] == "1").count();
    assert!(retried >= 1, "a request to the closed endpoint was retried: {text:#?}");
    assert!(fields.iter().filter(|f| f[3] == "200").all(|f| f[13] == "-"), "{text:#?}");
    let post = fields.iter().find(|f| f[2].starts_with("POST")).unwrap();
    assert_eq!((post[3].as_str(), post[4].as_str()), ("200", "5"), "bytes_in: {post:?}");
    let dead = fields.iter().find(|f| f[2].starts_with("GET app.test/dead")).unwrap();
    assert_eq!((dead[3].as_str(), dead[10].as_str(), dead[12].as_str()), ("502", "dead", "0"), "{dead:?}");
    assert!(dead[13].split(',').any(|c| c == "UF"), "{dead:?}");
    assert_eq!(dead[7], "-", "no connection, no connect time: {dead:?}");
    let slow_line = fields.iter().find(|f| f[2].starts_with("GET app.test/slow")).unwrap();
    assert_eq!((slow_line[3].as_str(), slow_line[13].as_str()), ("504", "UT"), "{slow_line:?}");
    let upstream_ms: f64 = slow_line[8].parse().unwrap();
    assert!(upstream_ms >= 200.0, "the try waited for the timeout: {slow_line:?}");
    let nowhere = fields.iter().find(|f| f[2].starts_with("GET app.test/nowhere")).unwrap();
    assert_eq!((nowhere[3].as_str(), nowhere[10].as_str(), nowhere[13].as_str()), ("404", "-", "NR"), "{nowhere:?}");

    // JSON: the same requests, one object per line with every field.
    let json: Vec<serde_json::Value> =
        lines(&dir.join("json.log"), 6).iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    let find = |path: &str| json.iter().filter(move |v| v["path"] == path).collect::<Vec<_>>();
    for v in find("/app/x?q=1") {
        assert_eq!((v["status"].as_u64(), v["bytes_out"].as_u64()), (Some(200), Some(body_len as u64)), "{v}");
        assert_eq!((v["method"].as_str(), v["protocol"].as_str()), (Some("GET"), Some("HTTP/1.1")), "{v}");
        assert_eq!((v["cluster"].as_str(), v["authority"].as_str()), (Some("app"), Some("app.test")), "{v}");
        assert_eq!(v["upstream"].as_str(), Some(fast.to_string().as_str()), "{v}");
        assert_eq!(v["route"].as_str(), Some("apps"), "the matched route's name: {v}");
        assert!(v["flags"].is_null() && v["grpc_status"].is_null(), "{v}");
        assert!(v["upstream_response_ms"].as_f64().is_some() && v["endpoint"].as_u64().is_some(), "{v}");
    }
    assert_eq!(find("/app/post")[0]["bytes_in"], 5);
    let retried = json.iter().filter(|v| v["retries"] == 1 && v["status"] == 200).count();
    assert!(retried >= 1, "{json:#?}");
    let dead = find("/dead")[0];
    assert_eq!((dead["status"].as_u64(), dead["upstream_connect_ms"].is_null()), (Some(502), true), "{dead}");
    assert!(dead["route"].is_null() && find("/nowhere")[0]["route"].is_null(), "no name, no route: {dead}");
    assert!(dead["flags"].as_str().unwrap().split(',').any(|c| c == "UF"), "{dead}");
    assert_eq!((find("/slow")[0]["status"].as_u64(), find("/slow")[0]["flags"].as_str()), (Some(504), Some("UT")));
    assert_eq!((find("/nowhere")[0]["flags"].as_str(), find("/nowhere")[0]["cluster"].is_null()), (Some("NR"), true));

    assert!(f.terminate().success());
    backends.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_access_log_format_is_refused_with_its_line_and_field() {
    let dir = temp_dir("access-log-bad");
    let path = dir.join("bad.toml");
    let config = "[[listener]]\nlisten = \"127.0.0.1:0\"\nroutes = [{ cluster = \"app\" }]\n\
                  access_log = { path = \"stdout\", format = \"$status $stauts\" }\n\n\
                  [[cluster]]\nname = \"app\"\nendpoints = [\"127.0.0.1:1\"]\n";
    std::fs::write(&path, config).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .args(["serve", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("bad.toml:4:") && stderr.contains("listener[0].access_log.format"), "{stderr}");
    assert!(stderr.contains("stauts"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
