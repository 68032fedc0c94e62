//! A tiny HTTP/1.1 GET over `std::net::TcpStream`, enough to poll `/health` and `/v1/models`.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::contract::{Error, Result};

/// An `http://host[:port]/path` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub host: String,
    pub port: u16,
    pub path: String,
}

impl Url {
    /// Parse a plain-HTTP URL (no TLS: serve-capture talks to a server on this machine).
    pub fn parse(s: &str) -> Result<Url> {
        let rest = s.strip_prefix("http://").ok_or_else(|| {
            Error::usage(format!(
                "'{s}': only http:// URLs are supported (the server is polled on this machine, without TLS)"
            ))
        })?;
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        let (host, port) = if let Some(h) = hostport.strip_prefix('[') {
            // [::1]:8000
            let end = h.find(']').ok_or_else(|| Error::usage(format!("'{s}': unclosed '[' in the host")))?;
            let port = match &h[end + 1..] {
                "" => 80,
                p => parse_port(p.strip_prefix(':').unwrap_or(p), s)?,
            };
            (h[..end].to_string(), port)
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), parse_port(p, s)?),
                None => (hostport.to_string(), 80),
            }
        };
        if host.is_empty() {
            return Err(Error::usage(format!("'{s}': no host")));
        }
        Ok(Url { host, port, path })
    }
}

fn parse_port(p: &str, url: &str) -> Result<u16> {
    p.parse().map_err(|_| Error::usage(format!("'{url}': '{p}' is not a TCP port")))
}

/// GET the URL; Ok(status code) when a response came back, Err(reason) when the connection or the response
/// failed (refused, timed out, not HTTP).
pub fn get_status(url: &Url, timeout: Duration) -> std::result::Result<u16, String> {
    let addrs: Vec<_> = (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {}: {e}", url.host))?
        .collect();
    let mut last = String::from("no address");
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(mut s) => {
                let _ = s.set_read_timeout(Some(timeout));
                let _ = s.set_write_timeout(Some(timeout));
                let host = if url.host.contains(':') { format!("[{}]", url.host) } else { url.host.clone() };
                let req = format!(
                    "GET {} HTTP/1.1\r\nHost: {host}:{}\r\nConnection: close\r\nAccept: */*\r\n\r\n",
                    url.path, url.port
                );
                s.write_all(req.as_bytes()).map_err(|e| format!("cannot send the request: {e}"))?;
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                // read until the status line is complete
                while !head.contains(&b'\n') && head.len() < 8192 {
                    match s.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                        Err(e) => return Err(format!("no response: {e}")),
                    }
                }
                return parse_status_line(&head);
            }
            Err(e) => last = format!("cannot connect to {addr}: {e}"),
        }
    }
    Err(last)
}

fn parse_status_line(head: &[u8]) -> std::result::Result<u16, String> {
    let text = String::from_utf8_lossy(head);
    let line = text.lines().next().unwrap_or("");
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next().and_then(|c| c.parse::<u16>().ok())) {
        (Some(v), Some(code)) if v.starts_with("HTTP/") => Ok(code),
        _ => Err(format!("not an HTTP response: {:?}", line.chars().take(60).collect::<String>())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            Url::parse("http://127.0.0.1:8000/health").unwrap(),
            Url { host: "127.0.0.1".into(), port: 8000, path: "/health".into() }
        );
        assert_eq!(Url::parse("http://localhost").unwrap().path, "/");
        assert_eq!(Url::parse("http://localhost").unwrap().port, 80);
        assert_eq!(Url::parse("http://[::1]:9/v1/models").unwrap().host, "::1");
        assert!(Url::parse("https://x/health").unwrap_err().message.contains("only http://"));
        assert!(Url::parse("http://x:99999/").is_err());
    }

    #[test]
    fn status_against_a_real_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut b = [0u8; 512];
            let n = c.read(&mut b).unwrap();
            assert!(String::from_utf8_lossy(&b[..n]).starts_with("GET /health HTTP/1.1\r\n"));
            c.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n").unwrap();
        });
        let url = Url::parse(&format!("http://127.0.0.1:{port}/health")).unwrap();
        assert_eq!(get_status(&url, Duration::from_secs(2)), Ok(503));
        t.join().unwrap();
        // nothing listens any more
        assert!(get_status(&url, Duration::from_secs(1)).is_err());
    }
}
