//! `dlio-rs`: the subcommand command line.

fn main() {
    dlio_rs::system::process_start();
    std::process::exit(dlio_rs::cli::dlio_rs_main(std::env::args().collect()));
}
