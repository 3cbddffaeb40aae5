//! `ferry monitor plot DIR -o FILE.svg|FILE.png`: one picture with the communication matrix
//! (bytes from rank to rank, log colour scale with its bar), the message-size histogram and
//! the phases of every rank over time. The same drawing code serves both formats (plotters).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ferry_monitor::format::Record;
use ferry_monitor::summary::{byte_matrix, phases, size_histogram, PhaseKind};
use plotters::coord::Shift;
use plotters::prelude::*;

const WIDTH: u32 = 1400;
const HEIGHT: u32 = 1000;
const FONT: &str = "sans-serif";

/// Draws the records in `dir` into `output` (`.svg` or `.png`).
pub fn plot(records: &[Record], output: &Path) -> Result<(), String> {
    let ext = output
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    // Text is measured (and for PNG drawn) with a TrueType font from the system.
    load_font()?;
    let fail = |e: String| format!("drawing {}: {e}", output.display());
    match ext.as_deref() {
        Some("svg") => {
            let root = SVGBackend::new(output, (WIDTH, HEIGHT)).into_drawing_area();
            draw(&root, records).map_err(fail)?;
            root.present().map_err(|e| fail(e.to_string()))
        }
        Some("png") => {
            let root = BitMapBackend::new(output, (WIDTH, HEIGHT)).into_drawing_area();
            draw(&root, records).map_err(fail)?;
            root.present().map_err(|e| fail(e.to_string()))
        }
        _ => Err(format!(
            "{}: the output must end in .svg or .png",
            output.display()
        )),
    }
}

/// Fonts looked for, in order, before any other `.ttf` under the system font directories.
const FONT_FILES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];

fn find_ttf(dir: &Path, depth: u32) -> Option<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    if let Some(f) = entries.iter().find(|p| {
        p.extension().is_some_and(|e| e.eq_ignore_ascii_case("ttf"))
            && !p.to_string_lossy().contains("Math")
    }) {
        return Some(f.clone());
    }
    if depth == 0 {
        return None;
    }
    entries
        .iter()
        .filter(|p| p.is_dir())
        .find_map(|p| find_ttf(p, depth - 1))
}

fn load_font() -> Result<(), String> {
    let chosen = std::env::var_os("FERRY_MONITOR_FONT")
        .map(PathBuf::from)
        .or_else(|| FONT_FILES.iter().map(PathBuf::from).find(|p| p.is_file()))
        .or_else(|| {
            ["/usr/share/fonts", "/usr/local/share/fonts"]
                .iter()
                .find_map(|d| find_ttf(Path::new(d), 3))
        })
        .ok_or_else(|| {
            "no TrueType font found for the labels (looked under /usr/share/fonts; set \
             FERRY_MONITOR_FONT=FILE.ttf or install fonts-dejavu-core)"
                .to_string()
        })?;
    let bytes = std::fs::read(&chosen)
        .map_err(|e| format!("cannot read font {}: {e}", chosen.display()))?;
    // plotters keeps registered fonts for the life of the process; this runs once per
    // `ferry monitor plot`.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font(FONT, FontStyle::Normal, bytes)
        .map_err(|_| format!("{} is not a usable TrueType font", chosen.display()))
}

fn e2s<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Viridis-like colour for `f` in [0, 1].
fn heat(f: f64) -> RGBColor {
    const STOPS: [(u8, u8, u8); 6] = [
        (68, 1, 84),
        (65, 68, 135),
        (42, 120, 142),
        (34, 168, 132),
        (122, 209, 81),
        (253, 231, 37),
    ];
    let f = f.clamp(0.0, 1.0) * (STOPS.len() - 1) as f64;
    let i = (f.floor() as usize).min(STOPS.len() - 2);
    let t = f - i as f64;
    let mix = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * t).round() as u8;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

fn human(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v >= 10.0 || u == 0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Integer tick labels only (ranks), for axes with cells centred on whole numbers.
fn rank_label(v: &f64) -> String {
    if (v - v.round()).abs() < 1e-6 && *v >= 0.0 {
        format!("{}", v.round() as i64)
    } else {
        String::new()
    }
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, records: &[Record]) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(e2s)?;
    let n = records.len();
    let backend = records.first().map_or("", |r| r.header.backend.as_str());
    let title = format!("ferry monitor: {n} ranks, recorded on {backend}");
    let root = root.titled(&title, (FONT, 26)).map_err(e2s)?;
    let (top, bottom) = root.split_vertically(HEIGHT * 11 / 20);
    let (matrix_area, hist_area) = top.split_horizontally(WIDTH / 2);
    let (matrix_area, bar_area) = matrix_area.split_horizontally(WIDTH / 2 - 120);
    draw_matrix(&matrix_area, &bar_area, records)?;
    draw_histogram(&hist_area, records)?;
    draw_timeline(&bottom, records)
}

fn draw_matrix<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    bar: &DrawingArea<DB, Shift>,
    records: &[Record],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let n = records.len();
    let m = byte_matrix(records);
    let max = m.iter().flatten().copied().max().unwrap_or(0).max(1) as f64;
    let min = m
        .iter()
        .flatten()
        .copied()
        .filter(|&b| b > 0)
        .min()
        .unwrap_or(1) as f64;
    // Log scale: a halo of kilobytes and a gather of megabytes stay distinguishable.
    let span = (max / min).ln().max(1e-9);
    let colour = |b: u64| {
        if b == 0 {
            RGBColor(235, 235, 235)
        } else {
            heat((b as f64 / min).ln() / span)
        }
    };
    let hi = n as f64 - 0.5;
    let mut chart = ChartBuilder::on(area)
        .caption("Bytes sent, rank to rank", (FONT, 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(-0.5..hi, -0.5..hi)
        .map_err(e2s)?;
    let ticks = n.clamp(2, 17);
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("receiving rank")
        .y_desc("sending rank")
        .x_labels(ticks)
        .y_labels(ticks)
        .x_label_formatter(&rank_label)
        .y_label_formatter(&rank_label)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(e2s)?;
    chart
        .draw_series(m.iter().enumerate().flat_map(|(from, row)| {
            row.iter().enumerate().map(move |(to, &b)| {
                let (x, y) = (to as f64, from as f64);
                Rectangle::new([(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)], colour(b).filled())
            })
        }))
        .map_err(e2s)?;

    // The colour scale.
    let mut scale = ChartBuilder::on(bar)
        .margin_top(40)
        .margin_bottom(57)
        .margin_right(10)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..1.0, (min..max.max(min * 1.0001)).log_scale())
        .map_err(e2s)?;
    scale
        .configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .y_labels(6)
        .y_label_formatter(&|v| human(*v))
        .y_desc("bytes")
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 15))
        .draw()
        .map_err(e2s)?;
    let steps = 100;
    scale
        .draw_series((0..steps).map(|i| {
            let f0 = i as f64 / steps as f64;
            let f1 = (i + 1) as f64 / steps as f64;
            let y0 = min * (span * f0).exp();
            let y1 = min * (span * f1).exp();
            Rectangle::new([(0.0, y0), (1.0, y1)], heat(f0).filled())
        }))
        .map_err(e2s)?;
    Ok(())
}

fn draw_histogram<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    records: &[Record],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let h = size_histogram(records);
    let top = h.iter().map(|c| c.1).max().unwrap_or(0).max(1) as f64 * 1.1;
    let k = h.len().max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption("Sizes of sent messages", (FONT, 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..k - 0.5, 0.0..top)
        .map_err(e2s)?;
    let bounds: Vec<u64> = h.iter().map(|c| c.0).collect();
    let label = move |v: &f64| {
        let i = v.round();
        if (v - i).abs() > 1e-6 || i < 0.0 {
            return String::new();
        }
        bounds
            .get(i as usize)
            .map(|&b| human(b as f64))
            .unwrap_or_default()
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(WHITE)
        .x_desc("message size (from)")
        .y_desc("messages sent")
        .x_labels(h.len().clamp(2, 12))
        .x_label_formatter(&label)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(e2s)?;
    chart
        .draw_series(h.iter().enumerate().map(|(i, &(_, c))| {
            let x = i as f64;
            Rectangle::new(
                [(x - 0.4, 0.0), (x + 0.4, c as f64)],
                RGBColor(42, 120, 142).filled(),
            )
        }))
        .map_err(e2s)?;
    Ok(())
}

fn kind_colour(kind: &PhaseKind, index: usize) -> RGBColor {
    const OTHERS: [RGBColor; 8] = [
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
        RGBColor(127, 127, 127),
    ];
    match kind {
        PhaseKind::PointToPoint => RGBColor(31, 119, 180),
        PhaseKind::Data => RGBColor(255, 127, 14),
        PhaseKind::Control => RGBColor(90, 90, 90),
        PhaseKind::Collective(_) => OTHERS[index % OTHERS.len()],
    }
}

fn draw_timeline<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    records: &[Record],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let n = records.len();
    // One clock for all ranks: each record's times count from its own start, which the
    // header gives in wall-clock time (ranks of one host share it; across hosts it is as good
    // as their clocks' agreement).
    let first = records
        .iter()
        .map(|r| r.header.start_unix_ns)
        .min()
        .unwrap_or(0);
    let offset_ms = |r: &Record| r.header.start_unix_ns.saturating_sub(first) as f64 * 1e-6;
    let end_ms = records
        .iter()
        .map(|r| offset_ms(r) + r.end_ns as f64 * 1e-6)
        .fold(1e-6, f64::max);
    // Phases shorter than a pixel merge with a neighbour of the same kind, so that a long run
    // stays a picture and not millions of invisible rectangles.
    let pixel_ms = end_ms / f64::from(WIDTH);
    let mut by_kind: BTreeMap<PhaseKind, Vec<(usize, f64, f64)>> = BTreeMap::new();
    for (rank, rec) in records.iter().enumerate() {
        let mut last: Option<(PhaseKind, f64, f64)> = None;
        let off = offset_ms(rec);
        for p in phases(rec) {
            let (s, e) = (off + p.start_ns as f64 * 1e-6, off + p.end_ns as f64 * 1e-6);
            match &mut last {
                Some((k, _, le)) if *k == p.kind && s - *le < pixel_ms => *le = e.max(*le),
                _ => {
                    if let Some((k, ls, le)) = last.take() {
                        by_kind.entry(k).or_default().push((rank, ls, le));
                    }
                    last = Some((p.kind, s, e));
                }
            }
        }
        if let Some((k, s, e)) = last {
            by_kind.entry(k).or_default().push((rank, s, e));
        }
    }
    // Head room above the last rank for the legend.
    let hi = n as f64 - 0.5 + (n as f64 * 0.12).max(0.9);
    let mut chart = ChartBuilder::on(area)
        .caption("Phases per rank over time", (FONT, 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..end_ms, -0.5..hi)
        .map_err(e2s)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .light_line_style(WHITE)
        .x_desc("time since the first rank started (ms)")
        .y_desc("rank")
        .y_labels(((n + 1) * 2).min(34))
        .y_label_formatter(&|v| {
            if *v < n as f64 - 0.25 {
                rank_label(v)
            } else {
                String::new()
            }
        })
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(e2s)?;
    let half = 0.4;
    for (i, (kind, bars)) in by_kind.iter().enumerate() {
        let colour = kind_colour(kind, i);
        let min_w = pixel_ms * 0.8;
        chart
            .draw_series(bars.iter().map(|&(rank, s, e)| {
                let y = rank as f64;
                Rectangle::new(
                    [(s, y - half), (e.max(s + min_w), y + half)],
                    colour.filled(),
                )
            }))
            .map_err(e2s)?
            .label(kind.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(e2s)?;
    Ok(())
}
