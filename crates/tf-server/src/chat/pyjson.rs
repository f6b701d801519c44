//! Python's `json.dumps(value, ensure_ascii=False)` byte for byte, since the prompt embeds its output.

use serde_json::{Number, Value};

/// Serialises like Python: `", "` and `": "` separators, raw UTF-8, Python float spelling.
pub fn dumps(value: &Value) -> String {
    let mut out = String::new();
    write_value(value, &mut out);
    out
}

fn write_value(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_string(k, out);
                out.push_str(": ");
                write_value(v, out);
            }
            out.push('}');
        }
    }
}

/// serde_json escapes exactly Python's set (quote, backslash, control characters, lowercase hex).
fn write_string(s: &str, out: &mut String) {
    out.push_str(&Value::String(s.to_string()).to_string());
}

fn write_number(n: &Number, out: &mut String) {
    match n.as_f64() {
        Some(f) if n.is_f64() => out.push_str(&python_float_repr(f)),
        _ => out.push_str(&n.to_string()),
    }
}

/// Python's `repr(float)`: shortest digits, scientific below 1e-4 or from 1e16, always a `.0` or exponent.
pub fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let sign = if f.is_sign_negative() { "-" } else { "" };
    if f == 0.0 {
        return format!("{sign}0.0");
    }
    let (digits, point) = shortest_digits(f.abs());
    let exp10 = point - 1;
    let body = if !(-4..16).contains(&exp10) {
        let mant = if digits.len() > 1 { format!("{}.{}", &digits[..1], &digits[1..]) } else { digits.clone() };
        let esign = if exp10 < 0 { '-' } else { '+' };
        format!("{mant}e{esign}{:02}", exp10.abs())
    } else if point <= 0 {
        format!("0.{}{digits}", "0".repeat((-point) as usize))
    } else if point as usize >= digits.len() {
        format!("{digits}{}.0", "0".repeat(point as usize - digits.len()))
    } else {
        format!("{}.{}", &digits[..point as usize], &digits[point as usize..])
    };
    format!("{sign}{body}")
}

/// Shortest round-trip digits (no leading or trailing zeros) and the point position: value = 0.DIGITS × 10^point.
fn shortest_digits(f: f64) -> (String, i32) {
    let text = format!("{f:e}");
    let (mant, exp) = text.split_once('e').unwrap_or((&text, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mant.chars().filter(char::is_ascii_digit).collect();
    let trimmed = digits.trim_end_matches('0');
    let trimmed = if trimmed.is_empty() { "0" } else { trimmed };
    (trimmed.to_string(), exp + 1)
}

/// A JSON value that keeps object key order, as Python's `json.loads` does (serde_json's `Map` sorts).
#[derive(Clone, Debug, PartialEq)]
pub enum Ordered {
    Null,
    Bool(bool),
    Int(String),
    Float(f64),
    Str(String),
    Array(Vec<Ordered>),
    Object(Vec<(String, Ordered)>),
}

/// Parses JSON text like Python's `json.loads` (surrounding whitespace allowed); `None` when invalid.
pub fn parse_ordered(text: &str) -> Option<Ordered> {
    let mut p = Parser { s: text.as_bytes(), text, i: 0 };
    let v = p.value()?;
    p.ws();
    (p.i == p.s.len()).then_some(v)
}

/// Python `json.dumps(…, ensure_ascii=False)` of an order-keeping value.
pub fn dumps_ordered(value: &Ordered) -> String {
    let mut out = String::new();
    write_ordered(value, &mut out);
    out
}

fn write_ordered(value: &Ordered, out: &mut String) {
    match value {
        Ordered::Null => out.push_str("null"),
        Ordered::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Ordered::Int(digits) => out.push_str(digits),
        Ordered::Float(f) => out.push_str(&python_float_repr(*f)),
        Ordered::Str(s) => write_string(s, out),
        Ordered::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_ordered(item, out);
            }
            out.push(']');
        }
        Ordered::Object(entries) => {
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_string(k, out);
                out.push_str(": ");
                write_ordered(v, out);
            }
            out.push('}');
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn eat(&mut self, lit: &str) -> bool {
        let hit = self.text[self.i..].starts_with(lit);
        if hit {
            self.i += lit.len();
        }
        hit
    }

    fn value(&mut self) -> Option<Ordered> {
        self.ws();
        match *self.s.get(self.i)? {
            b'n' => self.eat("null").then_some(Ordered::Null),
            b't' => self.eat("true").then_some(Ordered::Bool(true)),
            b'f' => self.eat("false").then_some(Ordered::Bool(false)),
            b'"' => self.string().map(Ordered::Str),
            b'[' => self.array(),
            b'{' => self.object(),
            _ => self.number(),
        }
    }

    /// Finds the closing quote, then lets serde_json decode the escapes exactly.
    fn string(&mut self) -> Option<String> {
        let start = self.i;
        self.i += 1;
        while *self.s.get(self.i)? != b'"' {
            self.i += if self.s[self.i] == b'\\' { 2 } else { 1 };
        }
        self.i += 1;
        serde_json::from_str(&self.text[start..self.i]).ok()
    }

    fn array(&mut self) -> Option<Ordered> {
        self.i += 1;
        let mut items = Vec::new();
        self.ws();
        if self.eat("]") {
            return Some(Ordered::Array(items));
        }
        loop {
            items.push(self.value()?);
            self.ws();
            if self.eat("]") {
                return Some(Ordered::Array(items));
            }
            if !self.eat(",") {
                return None;
            }
        }
    }

    /// A repeated key keeps its first position and takes the last value, as a Python dict does.
    fn object(&mut self) -> Option<Ordered> {
        self.i += 1;
        let mut entries: Vec<(String, Ordered)> = Vec::new();
        self.ws();
        if self.eat("}") {
            return Some(Ordered::Object(entries));
        }
        loop {
            self.ws();
            if self.s.get(self.i) != Some(&b'"') {
                return None;
            }
            let key = self.string()?;
            self.ws();
            if !self.eat(":") {
                return None;
            }
            let v = self.value()?;
            match entries.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 = v,
                None => entries.push((key, v)),
            }
            self.ws();
            if self.eat("}") {
                return Some(Ordered::Object(entries));
            }
            if !self.eat(",") {
                return None;
            }
        }
    }

    fn number(&mut self) -> Option<Ordered> {
        let start = self.i;
        while self.i < self.s.len() && matches!(self.s[self.i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
            self.i += 1;
        }
        let lit = &self.text[start..self.i];
        let n: Number = serde_json::from_str(lit).ok()?;
        if lit.contains(['.', 'e', 'E']) {
            return n.as_f64().map(Ordered::Float);
        }
        let digits = if lit == "-0" { "0" } else { lit };
        Some(Ordered::Int(digits.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_follow_python_repr() {
        for (f, want) in [
            (1.5, "1.5"),
            (100.0, "100.0"),
            (0.1, "0.1"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (-2.5e-7, "-2.5e-07"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
        ] {
            assert_eq!(python_float_repr(f), want, "{f}");
        }
    }

    #[test]
    fn ordered_parse_keeps_key_order_and_python_spelling() {
        let v = parse_ordered(" {\"z\": 1, \"a\": [1e16, -0, \"\\u00e9\"], \"z\": 2} ").unwrap();
        assert_eq!(dumps_ordered(&v), "{\"z\": 2, \"a\": [1e+16, 0, \"é\"]}");
        for bad in ["", "{", "[1,]", "{\"a\" 1}", "nul", "1 2", "\"abc"] {
            assert_eq!(parse_ordered(bad), None, "{bad}");
        }
    }

    #[test]
    fn separators_and_unicode_match_python() {
        let v = json!({"a": [1, "é\n\"x\"", null, true], "b": {"c": 2.0, "d": "\u{1}"}});
        assert_eq!(dumps(&v), "{\"a\": [1, \"é\\n\\\"x\\\"\", null, true], \"b\": {\"c\": 2.0, \"d\": \"\\u0001\"}}");
    }
}
