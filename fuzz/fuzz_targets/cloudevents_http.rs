//! CloudEvents HTTP binary mode: arbitrary header names and raw values (quoting and
//! percent-encoding included) and an arbitrary body. Decoding never panics; an accepted event
//! encodes to headers and a body that decode to the same event; header value decoding inverts
//! encoding for every UTF-8 value.
//!
//! Input: header lines `name:value` separated by `\n`, then a blank line (`\n\n`), then the
//! body. The value is taken raw after the first `:` (a leading space is dropped), so it may be
//! any bytes; a name that is not UTF-8 is read lossily, as an HTTP stack would reject it.
#![no_main]

use lakestream_cloudevents::http;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (head, body) = match data.windows(2).position(|pair| pair == b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data, &[][..]),
    };
    let headers: Vec<(String, &[u8])> = head
        .split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| {
            let (name, value) = match line.iter().position(|&b| b == b':') {
                Some(at) => (&line[..at], &line[at + 1..]),
                None => (line, &[][..]),
            };
            let value = value.strip_prefix(b" ").unwrap_or(value);
            (String::from_utf8_lossy(name).into_owned(), value)
        })
        .collect();
    let _ = http::detect_mode(headers.first().and_then(|(_, value)| std::str::from_utf8(value).ok()));
    for (_, value) in &headers {
        if let Ok(text) = std::str::from_utf8(value) {
            let encoded = http::encode_header_value(text);
            assert_eq!(http::decode_header_value(encoded.as_bytes()).as_deref(), Ok(text));
        }
        let _ = http::decode_header_value(value);
    }
    if let Ok(event) = http::decode_binary(&headers, body) {
        let (out_headers, out_body) = http::encode_binary(&event);
        let again = http::decode_binary(&out_headers, &out_body).expect("our binary-mode encoding decodes");
        assert_eq!(again, event);
        assert_eq!(http::encode_binary(&again), (out_headers, out_body));
    }
});
