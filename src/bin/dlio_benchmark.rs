//! `dlio_benchmark`: a drop-in for DLIO's entry point, taking only its Hydra-style words.

fn main() {
    dlio_rs::system::process_start();
    std::process::exit(dlio_rs::cli::dlio_benchmark_main(
        std::env::args().collect(),
    ));
}
