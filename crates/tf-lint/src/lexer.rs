//! Just enough lexing to tell comments apart from string, char and raw-string literals.

/// Source dialect; Rust and CUDA C++ differ in quotes, raw strings and comment nesting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lang {
    Rust,
    Cuda,
}

impl Lang {
    pub(crate) fn from_path(path: &str) -> Self {
        if path.ends_with(".cu") || path.ends_with(".cuh") { Lang::Cuda } else { Lang::Rust }
    }
}

/// Where comments were found; line numbers are 1-based and ascending.
#[derive(Debug, Default)]
pub(crate) struct Comments {
    pub(crate) block_starts: Vec<usize>,
    pub(crate) leading_line_comments: Vec<usize>,
}

pub(crate) fn scan(text: &str, lang: Lang) -> Comments {
    let mut cur = Cursor::new(text);
    let mut out = Comments::default();
    while let Some(c) = cur.peek(0) {
        match c {
            '/' if cur.peek(1) == Some('/') => {
                if cur.line_is_blank_so_far {
                    out.leading_line_comments.push(cur.line);
                }
                cur.skip_line_comment();
            }
            '/' if cur.peek(1) == Some('*') => {
                out.block_starts.push(cur.line);
                cur.skip_block_comment(lang == Lang::Rust);
            }
            '"' => cur.skip_string(lang),
            '\'' => match lang {
                Lang::Rust => cur.skip_rust_quote(),
                Lang::Cuda => cur.skip_c_char(),
            },
            c if c.is_ascii_digit() => cur.skip_number(lang),
            c if is_ident_char(c) => cur.skip_ident(lang),
            _ => cur.bump(),
        }
    }
    out
}

fn is_ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

struct Cursor {
    chars: Vec<char>,
    pos: usize,
    line: usize,
    line_is_blank_so_far: bool,
}

impl Cursor {
    fn new(text: &str) -> Self {
        Cursor { chars: text.chars().collect(), pos: 0, line: 1, line_is_blank_so_far: true }
    }

    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn at(&self, s: &str) -> bool {
        s.chars().enumerate().all(|(i, c)| self.peek(i) == Some(c))
    }

    fn bump(&mut self) {
        let Some(c) = self.peek(0) else { return };
        self.pos += 1;
        if c == '\n' {
            self.line += 1;
            self.line_is_blank_so_far = true;
        } else if !c.is_whitespace() {
            self.line_is_blank_so_far = false;
        }
    }

    fn bump_n(&mut self, n: usize) {
        for _ in 0..n {
            self.bump();
        }
    }

    fn skip_line_comment(&mut self) {
        while self.peek(0).is_some_and(|c| c != '\n') {
            self.bump();
        }
    }

    fn skip_block_comment(&mut self, nests: bool) {
        self.bump_n(2);
        let mut depth = 1;
        while self.peek(0).is_some() {
            if self.at("*/") {
                self.bump_n(2);
                depth -= 1;
                if depth == 0 {
                    return;
                }
            } else if nests && self.at("/*") {
                self.bump_n(2);
                depth += 1;
            } else {
                self.bump();
            }
        }
    }

    /// Skips a quoted literal; C literals cannot span lines, so a stray quote stops at the newline.
    fn skip_quoted(&mut self, quote: char, multiline: bool) {
        self.bump();
        while let Some(c) = self.peek(0) {
            if c == '\n' && !multiline {
                return;
            }
            self.bump();
            if c == '\\' {
                self.bump();
            } else if c == quote {
                return;
            }
        }
    }

    fn skip_string(&mut self, lang: Lang) {
        self.skip_quoted('"', lang == Lang::Rust);
    }

    fn skip_c_char(&mut self) {
        self.skip_quoted('\'', false);
    }

    /// A `'` opens a char literal when escaped or closed two chars on; otherwise it is a lifetime.
    fn skip_rust_quote(&mut self) {
        if self.peek(1) == Some('\\') {
            self.skip_quoted('\'', false);
        } else if self.peek(2) == Some('\'') && self.peek(1) != Some('\n') {
            self.bump_n(3);
        } else {
            self.bump();
        }
    }

    /// Eats numbers whole so that C++14 digit separators like `1'000` are not read as chars.
    fn skip_number(&mut self, lang: Lang) {
        let separator = if lang == Lang::Cuda { '\'' } else { '_' };
        while self.peek(0).is_some_and(|c| is_ident_char(c) || c == separator) {
            self.bump();
        }
    }

    fn skip_ident(&mut self, lang: Lang) {
        let start = self.pos;
        while self.peek(0).is_some_and(is_ident_char) {
            self.bump();
        }
        let ident: String = self.chars[start..self.pos].iter().collect();
        match (lang, ident.as_str()) {
            (Lang::Rust, "r" | "br" | "cr") => self.skip_rust_raw_string(),
            (Lang::Cuda, "R" | "LR" | "uR" | "UR" | "u8R") => self.skip_cpp_raw_string(),
            _ => {}
        }
    }

    /// Handles `r"..."` and `r#"..."#`; `r#ident` falls through untouched.
    fn skip_rust_raw_string(&mut self) {
        let hashes = (0..).take_while(|&i| self.peek(i) == Some('#')).count();
        if self.peek(hashes) != Some('"') {
            return;
        }
        self.bump_n(hashes + 1);
        let terminator: String = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
        self.skip_past(&terminator);
    }

    /// Handles `R"delim(...)delim"`.
    fn skip_cpp_raw_string(&mut self) {
        if self.peek(0) != Some('"') {
            return;
        }
        let delim: String = (1..)
            .map_while(|i| self.peek(i).filter(|&c| c != '(' && c != '"' && !c.is_whitespace()))
            .take(16)
            .collect();
        if self.peek(delim.chars().count() + 1) != Some('(') {
            return;
        }
        self.bump_n(delim.chars().count() + 2);
        self.skip_past(&format!("){delim}\""));
    }

    fn skip_past(&mut self, terminator: &str) {
        while self.peek(0).is_some() {
            if self.at(terminator) {
                self.bump_n(terminator.chars().count());
                return;
            }
            self.bump();
        }
    }
}
