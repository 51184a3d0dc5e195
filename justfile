# Everyday recipes. The README never depends on `just`; each recipe is one plain command.
# Install: pip install rust-just

# Run the whole test suite (starts its own throwaway PostgreSQL).
test *ARGS:
    bash scripts/test.sh {{ARGS}}

# Formatting and lints exactly as CI runs them.
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets -- -D warnings

# Everything CI runs.
ci:
    bash .ci/run

# Criterion benchmarks (all crates, or one: just bench crypto).
bench CRATE="":
    if [ -z "{{CRATE}}" ]; then cargo bench --workspace; else cargo bench -p {{CRATE}}; fi

# The main job: today the demo; `fabrx up` once the orderer exists.
up *ARGS:
    bash scripts/demo.sh {{ARGS}}

# Long-running BFT simulation (nightly).
sim-long:
    SIM_SEEDS=1000000 cargo test --release -p testkit sim
