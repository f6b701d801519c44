//! `cargo xtask bench plot RECEIPT`: a `bench openai` receipt as a PNG of three charts against concurrency.

use embedded_graphics::Drawable;
use embedded_graphics::mono_font::{MonoTextStyle, ascii::FONT_6X10, ascii::FONT_8X13};
use embedded_graphics::pixelcolor::{Rgb888, RgbColor};
use embedded_graphics::prelude::{DrawTarget, OriginDimensions, Pixel, Point, Primitive, Size};
use embedded_graphics::primitives::{Circle, Line, PrimitiveStyle};
use embedded_graphics::text::Text;
use serde_json::Value;
use std::process::ExitCode;

/// An RGB image in memory that embedded-graphics draws into.
struct Canvas {
    w: u32,
    h: u32,
    px: Vec<u8>,
}

impl OriginDimensions for Canvas {
    fn size(&self) -> Size {
        Size::new(self.w, self.h)
    }
}

impl DrawTarget for Canvas {
    type Color = Rgb888;
    type Error = std::convert::Infallible;

    fn draw_iter<I: IntoIterator<Item = Pixel<Rgb888>>>(&mut self, pixels: I) -> Result<(), Self::Error> {
        for Pixel(p, c) in pixels {
            if p.x >= 0 && p.y >= 0 && (p.x as u32) < self.w && (p.y as u32) < self.h {
                let i = ((p.y as u32 * self.w + p.x as u32) * 3) as usize;
                self.px[i..i + 3].copy_from_slice(&[c.r(), c.g(), c.b()]);
            }
        }
        Ok(())
    }
}

const PALETTE: [Rgb888; 8] = [
    Rgb888::new(31, 119, 180),
    Rgb888::new(255, 127, 14),
    Rgb888::new(44, 160, 44),
    Rgb888::new(214, 39, 40),
    Rgb888::new(148, 103, 189),
    Rgb888::new(140, 86, 75),
    Rgb888::new(227, 119, 194),
    Rgb888::new(23, 190, 207),
];

/// One line of a chart: its label and (concurrency, value) points.
type Series = (String, Vec<(u64, f64)>);

fn text(c: &mut Canvas, s: &str, x: i32, y: i32, big: bool) {
    let font = if big { &FONT_8X13 } else { &FONT_6X10 };
    let _ = Text::new(s, Point::new(x, y), MonoTextStyle::new(font, Rgb888::BLACK)).draw(c);
}

fn line(c: &mut Canvas, a: (i32, i32), b: (i32, i32), color: Rgb888, width: u32) {
    let _ = Line::new(Point::new(a.0, a.1), Point::new(b.0, b.1))
        .into_styled(PrimitiveStyle::with_stroke(color, width))
        .draw(c);
}

/// A tick value printed short: 1234.5 → "1235", 0.0123 → "0.012".
fn short(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// One chart in the box at (x0, y0) of size (w, h): concurrencies evenly spaced on x, 0 to the largest value on y.
fn chart(
    c: &mut Canvas,
    (x0, y0, w, h): (i32, i32, i32, i32),
    title: &str,
    xs: &[u64],
    series: &[Series],
    labels: &[String],
) {
    text(c, title, x0, y0 + 12, true);
    let (left, top, right, bottom) = (x0 + 52, y0 + 26, x0 + w - 10, y0 + h - 30);
    let max = series.iter().flat_map(|s| s.1.iter().map(|p| p.1)).fold(0.0f64, f64::max).max(1e-9) * 1.1;
    let grey = Rgb888::new(200, 200, 200);
    for i in 0..=4 {
        let y = bottom - (bottom - top) * i / 4;
        line(c, (left, y), (right, y), grey, 1);
        text(c, &short(max * i as f64 / 4.0), x0, y + 3, false);
    }
    line(c, (left, top), (left, bottom), Rgb888::BLACK, 1);
    line(c, (left, bottom), (right, bottom), Rgb888::BLACK, 1);
    let xpos = |conc: u64| {
        let i = xs.iter().position(|&x| x == conc).unwrap_or(0) as i32;
        left + 20 + (right - left - 40) * i / (xs.len() as i32 - 1).max(1)
    };
    for &x in xs {
        text(c, &format!("c{x}"), xpos(x) - 6, bottom + 14, false);
    }
    text(c, "concurrency", (left + right) / 2 - 33, bottom + 27, false);
    for (label, pts) in series {
        // Colours follow the legend's labels, so a series missing from one chart does not shift the others.
        let color = PALETTE[labels.iter().position(|l| l == label).unwrap_or(0) % PALETTE.len()];
        let at = |&(x, v): &(u64, f64)| (xpos(x), bottom - ((bottom - top) as f64 * v / max) as i32);
        for pair in pts.windows(2) {
            line(c, at(&pair[0]), at(&pair[1]), color, 2);
        }
        for p in pts {
            let (px, py) = at(p);
            let _ = Circle::new(Point::new(px - 3, py - 3), 7).into_styled(PrimitiveStyle::with_fill(color)).draw(c);
        }
    }
}

/// The receipt's cells as series per (kind, prompt length) of `value(cell)`.
fn series(cells: &[Value], value: impl Fn(&Value) -> Option<f64>) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for cell in cells {
        let label = format!("{} {} tok", cell["kind"].as_str().unwrap_or("?"), cell["prompt_tokens_target"]);
        let (Some(conc), Some(v)) = (cell["concurrency"].as_u64(), value(cell)) else { continue };
        match out.iter_mut().find(|s| s.0 == label) {
            Some(s) => s.1.push((conc, v)),
            None => out.push((label, vec![(conc, v)])),
        }
    }
    out.iter_mut().for_each(|s| s.1.sort_by_key(|p| p.0));
    out
}

/// Draws `receipt` (a `bench openai` receipt) into a PNG at `out`.
pub fn plot(receipt: &Value, out: &std::path::Path) -> Result<(), String> {
    let cells = receipt["cells"].as_array().filter(|c| !c.is_empty()).ok_or("the receipt has no cells")?;
    let mut xs: Vec<u64> = cells.iter().filter_map(|c| c["concurrency"].as_u64()).collect();
    xs.sort_unstable();
    xs.dedup();
    let charts: [(&str, Vec<Series>); 3] = [
        ("aggregate decode tok/s", series(cells, |c| c["aggregate_decode_tok_s"].as_f64())),
        ("TTFT p50 (s)", series(cells, |c| c["ttft_s"]["p50"].as_f64())),
        ("prefill tok/s per request, p50", series(cells, |c| c["prefill_tok_s"]["p50"].as_f64())),
    ];
    let mut labels: Vec<String> = Vec::new();
    for (label, _) in charts.iter().flat_map(|c| c.1.iter()) {
        if !labels.contains(label) {
            labels.push(label.clone());
        }
    }
    let legend: i32 = labels.iter().map(|l| 44 + 6 * l.len() as i32).sum();
    let (w, chart_h) = (1500u32, 400i32);
    let h = (chart_h + 50 + 16 * (legend / 1400 + 1) + 20) as u32;
    let mut c = Canvas { w, h, px: vec![255; (w * h * 3) as usize] };
    let head = format!(
        "{} on {}  ({}; max_tokens {}, temperature {})",
        receipt["model"].as_str().unwrap_or("?"),
        receipt["url"].as_str().unwrap_or("?"),
        receipt["endpoint"].as_str().unwrap_or("?"),
        receipt["max_tokens"],
        receipt["temperature"]
    );
    text(&mut c, &head, 10, 16, true);
    for (i, (title, s)) in charts.iter().enumerate() {
        chart(&mut c, (10 + i as i32 * 496, 30, 486, chart_h), title, &xs, s, &labels);
    }
    // The three charts share their series, so one legend under them names all and keeps each chart uncluttered.
    let (mut x, mut y) = (60, chart_h + 50);
    for (k, label) in labels.iter().enumerate() {
        let width = 44 + 6 * label.len() as i32;
        if x + width > w as i32 - 10 {
            (x, y) = (60, y + 16);
        }
        line(&mut c, (x, y - 4), (x + 24, y - 4), PALETTE[k % PALETTE.len()], 3);
        text(&mut c, label, x + 32, y, false);
        x += width;
    }
    let file = std::fs::File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header().map_err(|e| format!("{}: {e}", out.display()))?;
    writer.write_image_data(&c.px).map_err(|e| format!("{}: {e}", out.display()))
}

/// `cargo xtask bench plot RECEIPT [--out FILE]`: 0 when written, 1 when the receipt or the file failed, 2 for a bad command line.
pub fn run(args: &[String]) -> ExitCode {
    let (receipt, out) = match args {
        [r] => (r.clone(), std::path::Path::new(r).with_extension("png")),
        [r, flag, o] if flag == "--out" => (r.clone(), o.into()),
        _ => return crate::usage_error("bench plot RECEIPT [--out FILE.png] (a `bench openai` receipt)"),
    };
    let doc = std::fs::read_to_string(&receipt)
        .map_err(|e| format!("{receipt}: {e}"))
        .and_then(|t| serde_json::from_str::<Value>(&t).map_err(|e| format!("{receipt}: {e}")));
    match doc.and_then(|d| plot(&d, &out)) {
        Ok(()) => {
            eprintln!("plot: {}", out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench plot: {e}");
            ExitCode::FAILURE
        }
    }
}
