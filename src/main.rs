use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = nodewright::cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(nodewright::cli::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}`: the whole cause chain, not only the outermost context.
            eprintln!("error: {e:#}");
            e.exit_code()
        }
    }
}
