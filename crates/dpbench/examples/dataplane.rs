//! `cargo run -p mobicore-dpbench --example dataplane [-- --quick] [--split-cpus] [--json FILE]`:
//! the full matrix (or a quick one), the table on stdout, JSON optionally.

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut opts = if args.iter().any(|a| a == "--quick") {
        mobicore_dpbench::DataplaneBenchOptions::quick()
    } else {
        mobicore_dpbench::DataplaneBenchOptions::default()
    };
    opts.split_cpus = args.iter().any(|a| a == "--split-cpus");
    match mobicore_dpbench::run_blocking(&opts) {
        Ok(r) => {
            print!("{}", mobicore_dpbench::table(&r));
            if let Some(i) = args.iter().position(|a| a == "--json") {
                let path = args.get(i + 1).expect("--json FILE");
                std::fs::write(path, serde_json::to_string_pretty(&r).expect("serialize")).expect("write JSON");
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
