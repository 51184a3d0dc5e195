//! `fabrx wallet` (docs/contracts.md "Contracts"; docs/token.md "The wallet"): issue, transfer
//! and show balances of tokens. Exit code 0 only when the command did what it says (a
//! payment: committed).

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::time::Duration;
use wallet::ops::{self, Payment};
use wallet::{TokenNetwork, Wallet};

/// Arguments of `fabrx wallet`.
#[derive(Debug, Args)]
pub struct WalletArgs {
    /// The network directory (`fabrx up --dir`).
    #[arg(long, default_value = "./fabrx-net")]
    network: PathBuf,
    /// The wallet file (created by `init`, mode 0600).
    #[arg(long)]
    wallet: PathBuf,
    /// One JSON object on stdout instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// How long a payment waits for its final status, in seconds.
    #[arg(long, default_value_t = 60)]
    wait_secs: u64,
    /// The name of an environment variable holding the passphrase of the wallet's key:
    /// `init` seals the new key under it (PBKDF2 + ChaCha20-Poly1305), every other command
    /// needs it to open a sealed key.
    #[arg(long, global = true)]
    passphrase_env: Option<String>,
    #[command(subcommand)]
    cmd: WalletCmd,
}

/// The wallet's commands.
#[derive(Debug, Subcommand)]
pub enum WalletCmd {
    /// Create a wallet file with a new key pair.
    Init {
        /// A name for people.
        #[arg(long, default_value = "wallet")]
        name: String,
    },
    /// Print the owner's address (its public key).
    Address,
    /// Issue new tokens (issuer wallets only).
    Issue(PayArgs),
    /// Pay tokens to an address (change comes back to this wallet).
    Transfer(PayArgs),
    /// Tokens held, per type: available and locked in pending payments.
    Balance {
        /// Only this type.
        #[arg(long = "type")]
        token_type: Option<String>,
    },
    /// Every decided payment, sent and received.
    History,
    /// Look up pending payments and the tokens held.
    Sync,
    /// Cancel a pending payment by spending its tokens back to this wallet: at most one
    /// of the two commits, so nothing is paid twice.
    Abandon {
        /// The pending payment's tx id.
        #[arg(long)]
        tx: String,
    },
}

/// What a payment pays.
#[derive(Debug, Args)]
pub struct PayArgs {
    /// The payee's address.
    #[arg(long)]
    to: String,
    /// How much.
    #[arg(long)]
    amount: u64,
    /// The token type.
    #[arg(long = "type", default_value = "CBDC")]
    token_type: String,
}

impl PayArgs {
    fn payment(self, action: token::Action) -> anyhow::Result<Payment> {
        Ok(Payment {
            action,
            to: address(&self.to)?,
            amount: self.amount,
            token_type: self.token_type,
        })
    }
}

/// The token network of the directory `dir`, with the clients' TLS identity installed.
pub fn token_network(dir: &Path) -> anyhow::Result<TokenNetwork> {
    let config_path = netconfig::config_path(dir);
    let config = netconfig::NetworkConfig::load(&config_path)
        .with_context(|| format!("loading the network config {}", config_path.display()))?;
    crate::tls_setup::install_wallet(&config, dir)?;
    let app = config.token()?;
    let sidecars = config
        .committers()
        .map(|c| c.parties.iter().map(|p| p.sidecar.uri()).collect())
        .unwrap_or_default();
    // The query services that run: those `fabrx up` started when it wrote network.json
    // (committing parties only), else every one the config lists.
    let running = running_query_parties(dir)?;
    let query: Vec<String> = app
        .query
        .iter()
        .filter(|(p, _)| running.as_ref().is_none_or(|r| r.contains(p)))
        .map(|(_, e)| e.uri())
        .collect();
    Ok(TokenNetwork {
        routers: config.parties().iter().map(|p| p.router.uri()).collect(),
        sidecars,
        confirmations: wallet::net::confirmations(config.parties().len(), query.len()),
        query,
        endorsers: app.endorsers.iter().map(|e| e.endpoint.uri()).collect(),
        public: app.public.clone(),
        namespace: app.namespace.clone(),
        ns_version: app.ns_version,
        call_timeout: Duration::from_secs(10),
    })
}

/// The parties whose query service `fabrx up` started, from `<dir>/network.json`
/// (`None` without one: a network not started by `fabrx up`).
fn running_query_parties(dir: &Path) -> anyhow::Result<Option<Vec<u32>>> {
    Ok(devnet::file::NetworkFile::load(dir)?.map(|net| net.query_parties()))
}

fn address(text: &str) -> anyhow::Result<token::Address> {
    token::parse_address(text).map_err(|e| wallet::Error::UnknownAddress(e.detail).into())
}

/// The passphrase `--passphrase-env` names, read once.
static PASSPHRASE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Opens the wallet file, unsealing its key with the passphrase when one was given.
fn open_wallet(path: &Path) -> anyhow::Result<Wallet> {
    let passphrase = PASSPHRASE.get().and_then(Option::as_deref);
    Ok(Wallet::open_with(path, passphrase)?)
}

/// Runs a wallet command.
pub async fn run(args: WalletArgs) -> anyhow::Result<()> {
    let wait = Duration::from_secs(args.wait_secs);
    let json = args.json;
    let passphrase =
        match &args.passphrase_env {
            None => None,
            Some(var) => Some(std::env::var(var).with_context(|| {
                format!("--passphrase-env {var}: the environment variable {var} is not set")
            })?),
        };
    if passphrase.as_ref().is_some_and(String::is_empty) {
        bail!("the wallet passphrase is empty");
    }
    let _ = PASSPHRASE.set(passphrase.clone());
    match args.cmd {
        WalletCmd::Init { name } => {
            let w = match &passphrase {
                Some(p) => Wallet::create_sealed(&args.wallet, name, p)?,
                None => Wallet::create(&args.wallet, name)?,
            };
            let addr = token::address_text(&w.data.address()?);
            print(
                json,
                serde_json::json!({ "wallet": args.wallet, "address": addr }),
                &addr,
            );
            Ok(())
        }
        WalletCmd::Address => {
            let w = open_wallet(&args.wallet)?;
            let addr = token::address_text(&w.data.address()?);
            print(json, serde_json::json!({ "address": addr }), &addr);
            Ok(())
        }
        WalletCmd::Issue(p) => {
            let payment = p.payment(token::Action::Issue)?;
            pay(&args.network, &args.wallet, &payment, wait, json).await
        }
        WalletCmd::Transfer(p) => {
            let payment = p.payment(token::Action::Transfer)?;
            pay(&args.network, &args.wallet, &payment, wait, json).await
        }
        WalletCmd::Balance { token_type } => {
            balance(&args.network, &args.wallet, token_type, wait, json).await
        }
        WalletCmd::History => history(&args.network, &args.wallet, wait, json).await,
        WalletCmd::Sync => {
            let net = token_network(&args.network)?;
            let mut w = open_wallet(&args.wallet)?;
            let pending = ops::sync(&mut w, &net, wait).await?;
            let msg = format!("{} tokens, {pending} payments pending", w.data.tokens.len());
            print(
                json,
                serde_json::json!({ "tokens": w.data.tokens.len(), "pending_payments": pending }),
                &msg,
            );
            if pending > 0 {
                bail!("{pending} payments still pending: their tokens stay locked");
            }
            Ok(())
        }
        WalletCmd::Abandon { tx } => abandon(&args.network, &args.wallet, &tx, wait, json).await,
    }
}

async fn abandon(dir: &Path, file: &Path, tx: &str, wait: Duration, json: bool) -> anyhow::Result<()> {
    let net = token_network(dir)?;
    let mut w = open_wallet(file)?;
    let outcome = ops::abandon(&mut w, &net, tx, wait).await?;
    let value = serde_json::json!({
        "abandoned": tx,
        "cancellation": outcome.tx_id,
        "status": outcome.status.name(),
        "block": outcome.block,
    });
    if outcome.status == types::Status::Committed {
        print(
            json,
            value,
            &format!(
                "abandoned {tx}: its tokens are back (cancellation {} in block {})",
                outcome.tx_id, outcome.block
            ),
        );
        return Ok(());
    }
    if json {
        println!("{value}");
    }
    bail!(
        "the cancellation {} did not commit ({}): payment {tx} committed first, or its tokens were spent otherwise (`history`)",
        outcome.tx_id,
        outcome.status.name()
    )
}

async fn balance(
    dir: &Path,
    file: &Path,
    token_type: Option<String>,
    wait: Duration,
    json: bool,
) -> anyhow::Result<()> {
    let net = token_network(dir)?;
    let mut w = open_wallet(file)?;
    // Offline, the balance as last seen is still worth showing, marked as such.
    let pending = match ops::sync(&mut w, &net, wait.min(Duration::from_secs(10))).await {
        Ok(p) => p,
        Err(e @ wallet::Error::Unreachable(_)) => {
            eprintln!("warning: {e}; showing the balance as last seen");
            w.data.pending.len()
        }
        Err(e) => return Err(e.into()),
    };
    let balances = ops::balance(&w.data);
    let shown: Vec<_> = balances
        .iter()
        .filter(|(t, _)| token_type.as_ref().is_none_or(|want| want == *t))
        .collect();
    if json {
        let types: serde_json::Map<String, serde_json::Value> = shown
            .iter()
            .map(|(t, (a, l))| ((*t).clone(), serde_json::json!({ "available": a, "locked": l })))
            .collect();
        let total = shown
            .iter()
            .map(|(_, (a, l))| a.saturating_add(*l))
            .fold(0, u64::saturating_add);
        println!(
            "{}",
            serde_json::json!({ "balances": types, "total": total, "pending_payments": pending })
        );
        return Ok(());
    }
    if shown.is_empty() {
        println!("no tokens");
    }
    for (t, (a, l)) in shown {
        if *l > 0 {
            println!("{t}: {a} available, {l} locked in pending payments");
        } else {
            println!("{t}: {a}");
        }
    }
    Ok(())
}

async fn history(dir: &Path, file: &Path, wait: Duration, json: bool) -> anyhow::Result<()> {
    let net = token_network(dir)?;
    let mut w = open_wallet(file)?;
    ops::sync(&mut w, &net, wait.min(Duration::from_secs(10))).await?;
    for h in &w.data.history {
        if json {
            println!("{}", serde_json::to_string(h)?);
        } else {
            let block = h.block.map_or_else(|| "-".to_string(), |b| b.to_string());
            println!(
                "{} {:<8} {:>12} {:<6} {} {} block {block}",
                h.tx_id, h.direction, h.amount, h.token_type, h.counterparty, h.status
            );
        }
    }
    Ok(())
}

fn print(json: bool, value: serde_json::Value, text: &str) {
    if json {
        println!("{value}");
    } else {
        println!("{text}");
    }
}

async fn pay(dir: &Path, file: &Path, payment: &Payment, wait: Duration, json: bool) -> anyhow::Result<()> {
    let net = token_network(dir)?;
    let mut w = open_wallet(file)?;
    let outcome = ops::pay(&mut w, &net, payment, wait).await?;
    let reason = outcome.reason();
    let value = serde_json::json!({
        "tx_id": outcome.tx_id,
        "status": outcome.status.name(),
        "block": outcome.block,
        "amount": payment.amount,
        "type": payment.token_type,
        "to": token::address_text(&payment.to),
        "reason": reason,
    });
    match reason {
        None => {
            print(
                json,
                value,
                &format!(
                    "committed: {} {} to {} in block {} (tx {})",
                    payment.amount,
                    payment.token_type,
                    token::address_text(&payment.to),
                    outcome.block,
                    outcome.tx_id
                ),
            );
            Ok(())
        }
        Some(reason) => {
            if json {
                println!("{value}");
            }
            bail!("payment {} failed: {reason}", outcome.tx_id)
        }
    }
}
