//! `nodewright simulate`: the real loop against the simulated cluster and cloud.

use crate::cli::SimulateArgs;

pub async fn simulate(_args: SimulateArgs) -> anyhow::Result<()> {
    anyhow::bail!("simulate is not wired yet")
}
