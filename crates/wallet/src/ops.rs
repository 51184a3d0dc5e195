//! The wallet's commands: sync, balance, and payments (issue, transfer).

use crate::file::{HeldToken, HistoryEntry, PendingPayment, Wallet, WalletFile, address_of};
use crate::net::TokenNetwork;
use crate::{Error, Result};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;
use token::{Action, Address, Output, Request, Settlement, Token, address_text};
use types::Status;

/// A payment to make.
#[derive(Debug, Clone)]
pub struct Payment {
    /// Issue (issuer wallets) or transfer.
    pub action: Action,
    /// The payee.
    pub to: Address,
    /// How much.
    pub amount: u64,
    /// The token type.
    pub token_type: String,
}

/// How a payment ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentOutcome {
    /// The settlement tx id.
    pub tx_id: String,
    /// Its final status.
    pub status: Status,
    /// The block it was decided in.
    pub block: u64,
}

impl PaymentOutcome {
    /// Why an aborted payment failed, for people.
    pub fn reason(&self) -> Option<String> {
        match self.status {
            Status::Committed => None,
            Status::AbortedMvccConflict => Some(
                "double spend: an input was spent by another payment first (ABORTED_MVCC_CONFLICT)".into(),
            ),
            s => Some(format!("aborted: {}", s.name())),
        }
    }
}

/// Per type: (available, locked in pending payments).
pub fn balance(w: &WalletFile) -> BTreeMap<String, (u64, u64)> {
    let locked = w.locked();
    let mut out: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for t in &w.tokens {
        let e = out.entry(t.token_type.clone()).or_default();
        if locked.contains(t.key.as_str()) {
            e.1 = e.1.saturating_add(t.quantity);
        } else {
            e.0 = e.0.saturating_add(t.quantity);
        }
    }
    out
}

fn held(t: &Token) -> HeldToken {
    HeldToken {
        key: String::from_utf8_lossy(&t.key()).into_owned(),
        token_type: t.token_type.clone(),
        quantity: t.quantity,
        tx_id: t.tx_id.clone(),
        sender: t.sender.as_ref().map(address_text),
    }
}

/// Moves a decided pending payment into the history. A committed cancellation also
/// settles the payment it replaced: that one can never commit now (its inputs are spent),
/// so it leaves as `ABANDONED`.
fn finalize(w: &mut WalletFile, tx_id: &str, status: Status, block: u64) {
    let Some(pos) = w.pending.iter().position(|p| p.tx_id == tx_id) else {
        return;
    };
    let p = w.pending.remove(pos);
    if status == Status::Committed {
        let spent: HashSet<&String> = p.inputs.iter().collect();
        w.tokens.retain(|t| !spent.contains(&t.key));
        if let Some(original) = &p.replaces
            && let Some(at) = w.pending.iter().position(|o| &o.tx_id == original)
        {
            let o = w.pending.remove(at);
            w.history.push(HistoryEntry {
                tx_id: o.tx_id,
                direction: direction(&o.kind).into(),
                amount: o.amount,
                token_type: o.token_type,
                counterparty: o.to,
                status: ABANDONED.into(),
                block: None,
            });
        }
    }
    w.history.push(HistoryEntry {
        tx_id: p.tx_id,
        direction: direction(&p.kind).into(),
        amount: p.amount,
        token_type: p.token_type,
        counterparty: p.to,
        status: status.name().into(),
        block: Some(block),
    });
}

/// The history direction of a payment of `kind` this wallet made.
fn direction(kind: &str) -> &'static str {
    match kind {
        "issue" => "issued",
        "cancel" => "cancelled",
        _ => "sent",
    }
}

/// The history status of a payment replaced by a committed cancellation.
pub const ABANDONED: &str = "ABANDONED";

/// Settles what is known about pending payments: decided ones move to the history
/// (their inputs unlocked, or spent); undecided ones are sent again (the same envelope:
/// a tx id is decided once) and waited for up to `wait`. Returns how many are left.
pub async fn resolve_pending(w: &mut WalletFile, net: &TokenNetwork, wait: Duration) -> Result<usize> {
    if w.pending.is_empty() {
        return Ok(0);
    }
    look_up_pending(w, net).await?;
    // A payment being cancelled is not sent again: its cancellation is.
    let undecided: Vec<PendingPayment> = w
        .pending
        .iter()
        .filter(|p| !w.pending.iter().any(|c| c.replaces.as_ref() == Some(&p.tx_id)))
        .cloned()
        .collect();
    for p in undecided {
        let Ok(envelope) = hex::decode(&p.envelope) else {
            continue;
        };
        net.submit(&envelope).await;
        if let Some((status, block)) = net.wait_status(&p.tx_id, wait).await? {
            finalize(w, &p.tx_id, status, block);
        }
    }
    Ok(w.pending.len())
}

/// Moves pending payments whose final status is known into the history, sending nothing.
async fn look_up_pending(w: &mut WalletFile, net: &TokenNetwork) -> Result<()> {
    if w.pending.is_empty() {
        return Ok(());
    }
    let ids: Vec<String> = w.pending.iter().map(|p| p.tx_id.clone()).collect();
    let known = net.statuses(&ids).await?;
    // Cancellations first: a committed one settles the payment it replaced.
    let mut decided: Vec<(&String, &(Status, u64))> = known.iter().collect();
    decided.sort_by_key(|(id, _)| !w.pending.iter().any(|p| &p.tx_id == *id && p.replaces.is_some()));
    for (id, (status, block)) in decided {
        finalize(w, id, *status, *block);
    }
    Ok(())
}

/// Replaces the known tokens with the unspent ones the committed state gives this
/// wallet's owner, and records payments received since the last sync in the history.
pub async fn refresh(w: &mut WalletFile, net: &TokenNetwork) -> Result<()> {
    let me = w.address()?;
    let owned = net.owned(&w.key()?).await?;
    let known: HashSet<&str> = w
        .history
        .iter()
        .map(|h| h.tx_id.as_str())
        .chain(w.pending.iter().map(|p| p.tx_id.as_str()))
        .collect();
    let mut incoming: BTreeMap<String, (u64, String, String)> = BTreeMap::new();
    for t in owned
        .iter()
        .filter(|t| t.sender != Some(me) && !known.contains(t.tx_id.as_str()))
    {
        let e = incoming.entry(t.tx_id.clone()).or_insert_with(|| {
            let from = t
                .sender
                .as_ref()
                .map_or_else(|| "issuer".to_string(), address_text);
            (0, t.token_type.clone(), from)
        });
        e.0 = e.0.saturating_add(t.quantity);
    }
    let ids: Vec<String> = incoming.keys().cloned().collect();
    let blocks: HashMap<String, (Status, u64)> = if ids.is_empty() {
        HashMap::new()
    } else {
        net.statuses(&ids).await?
    };
    for (tx_id, (amount, token_type, from)) in incoming {
        let block = blocks.get(&tx_id).map(|(_, b)| *b);
        w.history.push(HistoryEntry {
            tx_id,
            direction: "received".into(),
            amount,
            token_type,
            counterparty: from,
            status: Status::Committed.name().into(),
            block,
        });
    }
    w.tokens = owned.iter().map(held).collect();
    Ok(())
}

/// Resolves pending payments and refreshes the tokens; saves the file.
pub async fn sync(w: &mut Wallet, net: &TokenNetwork, wait: Duration) -> Result<usize> {
    let left = resolve_pending(&mut w.data, net, wait).await?;
    refresh(&mut w.data, net).await?;
    w.save()?;
    Ok(left)
}

/// Chooses unlocked tokens of `token_type` worth at least `amount` (largest first).
fn select_inputs(w: &WalletFile, token_type: &str, amount: u64) -> Result<(Vec<HeldToken>, u64)> {
    let locked = w.locked();
    let mut candidates: Vec<&HeldToken> = w
        .tokens
        .iter()
        .filter(|t| t.token_type == token_type && !locked.contains(t.key.as_str()))
        .collect();
    candidates.sort_by(|a, b| b.quantity.cmp(&a.quantity).then(a.key.cmp(&b.key)));
    let mut chosen = Vec::new();
    let mut sum: u64 = 0;
    for t in candidates {
        if sum >= amount || chosen.len() >= token::MAX_INPUTS {
            break;
        }
        sum = sum.saturating_add(t.quantity);
        chosen.push(t.clone());
    }
    if sum < amount {
        let locked_sum: u64 = w
            .tokens
            .iter()
            .filter(|t| t.token_type == token_type && locked.contains(t.key.as_str()))
            .map(|t| t.quantity)
            .fold(0, u64::saturating_add);
        return Err(Error::InsufficientFunds {
            available: sum,
            needed: amount,
            token_type: token_type.into(),
            locked: if locked_sum > 0 {
                format!(" ({locked_sum} more locked in pending payments)")
            } else {
                String::new()
            },
        });
    }
    Ok((chosen, sum))
}

/// Builds and signs the request of `payment` from this wallet.
fn build_request(w: &WalletFile, payment: &Payment) -> Result<(Request, Vec<String>)> {
    if payment.amount == 0 {
        return Err(Error::Invalid("the amount must be at least 1".into()));
    }
    let key = w.key()?;
    let me = address_of(&key)?;
    let nonce: [u8; 32] = rand::random();
    let payee = Output {
        owner: payment.to,
        token_type: payment.token_type.clone(),
        quantity: payment.amount,
    };
    let (inputs, outputs) = match payment.action {
        Action::Issue => (Vec::new(), vec![payee]),
        Action::Transfer => {
            let (chosen, sum) = select_inputs(w, &payment.token_type, payment.amount)?;
            let mut outputs = vec![payee];
            let change = sum.saturating_sub(payment.amount);
            if change > 0 {
                outputs.push(Output {
                    owner: me,
                    token_type: payment.token_type.clone(),
                    quantity: change,
                });
            }
            (chosen.into_iter().map(|t| t.key).collect(), outputs)
        }
    };
    let keys = inputs.iter().map(|k| k.clone().into_bytes()).collect();
    let request = Request::new(payment.action, nonce.to_vec(), me, keys, outputs).sign(&key);
    Ok((request, inputs))
}

/// The settlement of `request` and its envelope: endorsed by t endorsers (each partial
/// verified), aggregated, the aggregate checked under the group key, signed by `key`.
async fn endorsed_envelope(
    net: &TokenNetwork,
    request: &Request,
    key: &crypto::SigningKey,
) -> Result<(Settlement, Vec<u8>)> {
    let settlement = Settlement::build(request, &net.namespace, net.ns_version);
    let message = settlement.endorsement_bytes();
    let partials = net.endorse(request, &message).await?;
    let aggregate = crypto::aggregate_partials(&net.public, &partials)
        .map_err(|e| Error::Invalid(format!("aggregating the endorsements: {e}")))?;
    crypto::verify_namespace_endorsement(net.public.group_public_key(), &message, &aggregate)
        .map_err(|e| Error::Invalid(format!("the aggregate endorsement does not verify: {e}")))?;
    let envelope = token::envelope(request, &settlement, aggregate.as_bytes(), key);
    Ok((settlement, envelope))
}

/// Makes a payment: sync, select inputs, endorse (t of n), aggregate, write the pending
/// payment (inputs locked), submit to every router, wait up to `wait` for the final
/// status, record it. Before the pending payment is written nothing is saved: a failure
/// there leaves the wallet file as it was.
pub async fn pay(
    w: &mut Wallet,
    net: &TokenNetwork,
    payment: &Payment,
    wait: Duration,
) -> Result<PaymentOutcome> {
    let mut data = w.data.clone();
    resolve_pending(&mut data, net, wait).await?;
    refresh(&mut data, net).await?;
    let to = address_text(&payment.to);
    if let Some(p) = data.pending.iter().find(|p| {
        p.replaces.is_none() && p.to == to && p.amount == payment.amount && p.token_type == payment.token_type
    }) {
        // A retry of a payment whose outcome is not known yet would pay twice.
        return Err(Error::StillPending {
            tx_id: p.tx_id.clone(),
            amount: p.amount,
            token_type: p.token_type.clone(),
            to: p.to.clone(),
        });
    }
    let (request, inputs) = build_request(&data, payment)?;
    let (settlement, envelope) = endorsed_envelope(net, &request, &data.key()?).await?;
    let tx_id = settlement.tx_id.0.clone();
    data.pending.push(PendingPayment {
        tx_id: tx_id.clone(),
        kind: match payment.action {
            Action::Issue => "issue",
            Action::Transfer => "transfer",
        }
        .into(),
        to: address_text(&payment.to),
        amount: payment.amount,
        token_type: payment.token_type.clone(),
        inputs,
        envelope: hex::encode(&envelope),
        replaces: None,
    });
    w.data = data;
    w.save()?;
    // From here on the payment stays pending until its final status is known (or a
    // cancellation replaces it): a router that did not answer in time may still have
    // forwarded it, so no silence or refusal is taken to mean it was not sent.
    let submitted = net.submit(&envelope).await;
    let Some((status, block)) = net.wait_status(&tx_id, wait).await? else {
        return Err(Error::Unconfirmed {
            tx_id,
            detail: format!(
                "{} of {} routers acknowledged it (quorum {}), no final status within {wait:?}",
                submitted.acks,
                net.routers.len(),
                submitted.quorum
            ),
        });
    };
    finalize(&mut w.data, &tx_id, status, block);
    if status == Status::Committed {
        let me = w.data.address()?;
        w.data
            .tokens
            .extend(settlement.outputs.iter().filter(|t| t.owner == me).map(held));
    }
    w.save()?;
    Ok(PaymentOutcome { tx_id, status, block })
}

/// Cancels pending payment `tx_id` by replacing it: a new payment spends the same inputs
/// back to this wallet. At most one of the two can commit (they spend the same tokens at
/// version 0), so the user pays at most once whatever the network did with the first; the
/// next `sync` tells which one committed. Refused when the endorsers see an input spent
/// already (then the first payment, or another copy of the wallet, spent it: `sync`).
pub async fn abandon(
    w: &mut Wallet,
    net: &TokenNetwork,
    tx_id: &str,
    wait: Duration,
) -> Result<PaymentOutcome> {
    let mut data = w.data.clone();
    // Look up, but do not send the payment again: it is being given up.
    look_up_pending(&mut data, net).await?;
    refresh(&mut data, net).await?;
    let Some(original) = data.pending.iter().find(|p| p.tx_id == tx_id).cloned() else {
        w.data = data;
        w.save()?;
        return Err(Error::Invalid(format!(
            "no pending payment {tx_id} (it may have been decided: see `history`)"
        )));
    };
    if original.kind == "issue" || original.inputs.is_empty() {
        return Err(Error::Invalid(
            "an issue spends no tokens, so it cannot be replaced: wait for its status".into(),
        ));
    }
    let key = data.key()?;
    let me = address_of(&key)?;
    let held: Vec<&HeldToken> = data
        .tokens
        .iter()
        .filter(|t| original.inputs.contains(&t.key))
        .collect();
    if held.len() != original.inputs.len() {
        return Err(Error::Invalid(format!(
            "the inputs of {tx_id} are no longer among this wallet's unspent tokens: it, or another payment, spent them (`sync`)"
        )));
    }
    let sum = held.iter().map(|t| t.quantity).try_fold(0u64, u64::checked_add);
    let sum = sum.ok_or_else(|| Error::Invalid("the inputs' sum overflows".into()))?;
    let nonce: [u8; 32] = rand::random();
    let request = Request::new(
        Action::Transfer,
        nonce.to_vec(),
        me,
        original.inputs.iter().map(|k| k.clone().into_bytes()).collect(),
        vec![Output {
            owner: me,
            token_type: original.token_type.clone(),
            quantity: sum,
        }],
    )
    .sign(&key);
    let (settlement, envelope) = endorsed_envelope(net, &request, &key).await?;
    let cancel_id = settlement.tx_id.0.clone();
    data.pending.push(PendingPayment {
        tx_id: cancel_id.clone(),
        kind: "cancel".into(),
        to: address_text(&me),
        amount: sum,
        token_type: original.token_type.clone(),
        inputs: original.inputs.clone(),
        envelope: hex::encode(&envelope),
        replaces: Some(original.tx_id.clone()),
    });
    w.data = data;
    w.save()?;
    net.submit(&envelope).await;
    resolve_pending(&mut w.data, net, wait).await?;
    refresh(&mut w.data, net).await?;
    w.save()?;
    let decided = w.data.history.iter().rev().find(|h| h.tx_id == cancel_id);
    match decided {
        Some(h) => Ok(PaymentOutcome {
            tx_id: cancel_id,
            status: h.status.parse().unwrap_or(Status::AbortedMvccConflict),
            block: h.block.unwrap_or(0),
        }),
        None => Err(Error::Unconfirmed {
            tx_id: cancel_id,
            detail: format!("the cancellation of {tx_id} has no final status within {wait:?}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wallet_with(tokens: &[(&str, u64)]) -> WalletFile {
        let key = crypto::derive_signing_key(crypto::Scheme::Ed25519, "ops-test");
        let mut w = WalletFile::new("t".into(), &key);
        for (k, q) in tokens {
            w.tokens.push(HeldToken {
                key: (*k).into(),
                token_type: "EUR".into(),
                quantity: *q,
                tx_id: "t".into(),
                sender: None,
            });
        }
        w
    }

    #[test]
    fn inputs_cover_the_amount_and_locked_tokens_are_left_alone() {
        let mut w = wallet_with(&[("a", 100), ("b", 500), ("c", 300)]);
        let (chosen, sum) = select_inputs(&w, "EUR", 600).unwrap();
        assert_eq!((chosen.len(), sum), (2, 800));
        w.pending.push(PendingPayment {
            tx_id: "p".into(),
            kind: "transfer".into(),
            to: "x".into(),
            amount: 1,
            token_type: "EUR".into(),
            inputs: vec!["b".into()],
            envelope: String::new(),
            replaces: None,
        });
        assert_eq!(balance(&w)["EUR"], (400, 500));
        let e = select_inputs(&w, "EUR", 600).unwrap_err();
        assert!(e.to_string().contains("insufficient funds"), "{e}");
        assert!(e.to_string().contains("500 more locked"), "{e}");
        assert!(select_inputs(&w, "USD", 1).is_err());
    }

    #[test]
    fn a_transfer_pays_change_back_and_signs() {
        let w = wallet_with(&[("a", 1000)]);
        let payment = Payment {
            action: Action::Transfer,
            to: address_of(&crypto::derive_signing_key(crypto::Scheme::Ed25519, "payee")).unwrap(),
            amount: 300,
            token_type: "EUR".into(),
        };
        let (req, inputs) = build_request(&w, &payment).unwrap();
        assert_eq!(inputs, vec!["a".to_string()]);
        assert_eq!(req.outputs.len(), 2);
        assert_eq!((req.outputs[0].quantity, req.outputs[1].quantity), (300, 700));
        req.verify_signature().unwrap();
        let zero = Payment { amount: 0, ..payment };
        assert!(build_request(&w, &zero).is_err());
    }

    #[test]
    fn a_decided_payment_leaves_pending_for_the_history() {
        let mut w = wallet_with(&[("a", 1000)]);
        w.pending.push(PendingPayment {
            tx_id: "p".into(),
            kind: "transfer".into(),
            to: "bob".into(),
            amount: 300,
            token_type: "EUR".into(),
            inputs: vec!["a".into()],
            envelope: String::new(),
            replaces: None,
        });
        finalize(&mut w, "p", Status::AbortedMvccConflict, 7);
        assert!(w.pending.is_empty());
        assert_eq!(w.tokens.len(), 1, "an aborted payment spends nothing");
        assert_eq!(w.history[0].status, "ABORTED_MVCC_CONFLICT");
        assert_eq!(w.history[0].block, Some(7));
    }
}
