//! The replay as an SVG: nodes per group, pending pods, requested against allocatable
//! CPU and memory over time, with scale-ups and removals marked.

use std::path::Path;

use super::report::Timeline;

#[derive(Debug, thiserror::Error)]
#[error("plot {path}: {message}")]
pub struct PlotError {
    pub path: String,
    pub message: String,
}

/// Writes the SVG of `timeline` to `path`.
pub fn plot_svg(timeline: &Timeline, title: &str, path: &Path) -> Result<(), PlotError> {
    let _ = (timeline, title);
    Err(PlotError {
        path: path.display().to_string(),
        message: "not implemented yet".into(),
    })
}
