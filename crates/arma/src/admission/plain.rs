//! The fast path of [`super::check_envelope`] for the common request on an open network:
//! a fabrx envelope of a data tx, without a nonce, from a creator that is not
//! self-certified, written the way protobuf encoders write messages.
//!
//! The full check decodes the envelope and its tx into owned protobuf structures, then
//! into `types::Tx`, then checks it (`types::check`): a few dozen allocations and copies
//! per request, about a fifth of a router's CPU at 10,000 tx/s (issue 25). This walks the
//! same bytes in place and checks the same rules without allocating per field.
//!
//! It answers only **"accepted"** or **"not known"**: [`plainly_valid`] is true only for
//! bytes the full check accepts, and the caller runs the full check whenever it is false.
//! So it never refuses anything, and its refusals never need to match the full check's
//! statuses. To stay on the safe side of the decoder's rules it gives up (false) on
//! everything unusual, even where the full check would accept: unknown fields, a
//! singular field repeated (the decoder keeps the last, or merges messages), wire types
//! other than varint and length-delimited, both `creator` variants, a nonce, a
//! self-certified creator or reserved tx id, `_meta` writes, a payload type other than
//! `PAYLOAD_TYPE_TX` written as exactly 1, and more than [`MAX_SMALL`] namespaces or keys
//! in a namespace (the duplicate checks here are linear). The property test below checks
//! "true ⇒ the full check accepts" on valid, mutated and random bytes.

use types::check::{MAX_KEY_LEN, MAX_VALUE_LEN, check_tx_id, is_valid_namespace_id};

/// The most namespaces, and keys per namespace, the fast path handles.
const MAX_SMALL: usize = 16;

/// One field's value.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

/// The fields of one message, in order; `None` for anything not plain (see the module doc).
struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn of(bytes: &'a [u8]) -> Fields<'a> {
        Fields { bytes, at: 0 }
    }

    fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.bytes.get(self.at)?;
            self.at = self.at.checked_add(1)?;
            let part = u64::from(b & 0x7f);
            // A tenth byte may only carry the top bit of a u64.
            if shift == 63 && part > 1 {
                return None;
            }
            value |= part << shift;
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// The next field: `Some(None)` at the end, `None` when not plain.
    fn next(&mut self) -> Option<Option<(u64, Value<'a>)>> {
        if self.at == self.bytes.len() {
            return Some(None);
        }
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 || number > u64::from(u32::MAX >> 3) {
            return None;
        }
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            2 => {
                let len = usize::try_from(self.varint()?).ok()?;
                let end = self.at.checked_add(len)?;
                let bytes = self.bytes.get(self.at..end)?;
                self.at = end;
                Value::Bytes(bytes)
            }
            _ => return None,
        };
        Some(Some((number, value)))
    }
}

/// Marks field `number` of a message with singular fields `1..=N` as seen; `None` if it is
/// unknown or already seen.
fn once<const N: usize>(seen: &mut [bool; N], number: u64) -> Option<()> {
    let i = usize::try_from(number).ok()?.checked_sub(1)?;
    let slot = seen.get_mut(i)?;
    if *slot {
        return None;
    }
    *slot = true;
    Some(())
}

fn text(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes).ok()
}

/// Whether the full check accepts `bytes` (see the module doc): true only if it does.
pub(super) fn plainly_valid(bytes: &[u8]) -> bool {
    envelope(bytes).is_some()
}

fn envelope(bytes: &[u8]) -> Option<()> {
    let mut seen = [false; 6];
    let (mut payload, mut tx_id, mut payload_type) = (None, None, None);
    let mut fields = Fields::of(bytes);
    while let Some((number, value)) = fields.next()? {
        once(&mut seen, number)?;
        match (number, value) {
            (1, Value::Bytes(b)) => payload = Some(b),
            // The signature: not checked on an open network (self-certified creators,
            // whose signature is, are left to the full check).
            (2, Value::Bytes(_)) => {}
            (3, Value::Bytes(b)) => {
                let msp = identity(b)?;
                if msp == wire::SELF_CERTIFIED_MSP {
                    return None;
                }
            }
            (4, Value::Bytes(b)) => tx_id = Some(text(b)?),
            // A nonce binds the tx id to the creator: left to the full check.
            (5, Value::Bytes([])) => {}
            (6, Value::Varint(v)) => payload_type = Some(v),
            _ => return None,
        }
    }
    if payload_type != Some(wire::pb::PayloadType::Tx as u64) {
        return None;
    }
    let tx_id = tx_id?;
    check_tx_id(tx_id).ok()?;
    if tx_id.starts_with(types::txid::SELF_CERTIFIED_ID_PREFIX) {
        return None;
    }
    tx(payload.unwrap_or_default())
}

/// Checks an `Identity` and returns its MSP id.
fn identity(bytes: &[u8]) -> Option<&str> {
    let mut seen = [false; 3];
    let mut msp = "";
    let mut fields = Fields::of(bytes);
    while let Some((number, value)) = fields.next()? {
        once(&mut seen, number)?;
        match (number, value) {
            (1, Value::Bytes(b)) => msp = text(b)?,
            (2, Value::Bytes(_)) => {}
            (3, Value::Bytes(b)) => {
                text(b)?;
            }
            _ => return None,
        }
    }
    // One variant of the `creator` oneof at most.
    if seen[1] && seen[2] {
        return None;
    }
    Some(msp)
}

fn tx(bytes: &[u8]) -> Option<()> {
    let mut namespaces: Vec<&str> = Vec::new();
    let mut endorsement_sets = 0usize;
    let mut fields = Fields::of(bytes);
    while let Some((number, value)) = fields.next()? {
        match (number, value) {
            (1, Value::Bytes(b)) => {
                if namespaces.len() == MAX_SMALL {
                    return None;
                }
                let id = namespace(b)?;
                if namespaces.contains(&id) {
                    return None;
                }
                namespaces.push(id);
            }
            (2, Value::Bytes(b)) => {
                endorsements(b)?;
                endorsement_sets = endorsement_sets.checked_add(1)?;
            }
            (3, Value::Bytes(_)) => {}
            _ => return None,
        }
    }
    (!namespaces.is_empty() && endorsement_sets == namespaces.len()).then_some(())
}

/// Checks a `TxNamespace` and returns its id.
fn namespace(bytes: &[u8]) -> Option<&str> {
    let mut seen = [false; 2];
    let mut id = "";
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut writes = false;
    let mut fields = Fields::of(bytes);
    while let Some((number, value)) = fields.next()? {
        let key = match (number, value) {
            (1, Value::Bytes(b)) => {
                once(&mut seen, 1)?;
                id = text(b)?;
                continue;
            }
            (2, Value::Varint(_)) => {
                once(&mut seen, 2)?;
                continue;
            }
            (3, Value::Bytes(b)) => key_of(b, Access::Read)?,
            (4, Value::Bytes(b)) => {
                writes = true;
                key_of(b, Access::ReadWrite)?
            }
            (5, Value::Bytes(b)) => {
                writes = true;
                key_of(b, Access::Write)?
            }
            _ => return None,
        };
        if key.is_empty() || key.len() > MAX_KEY_LEN || keys.len() == MAX_SMALL || keys.contains(&key) {
            return None;
        }
        keys.push(key);
    }
    let plain = is_valid_namespace_id(id) && id != types::META_NAMESPACE && writes;
    plain.then_some(id)
}

/// The three kinds of key access of a namespace.
#[derive(Clone, Copy)]
enum Access {
    /// `Read { key = 1, optional uint64 version = 2 }`.
    Read,
    /// `ReadWrite { key = 1, optional uint64 version = 2, value = 3 }`.
    ReadWrite,
    /// `Write { key = 1, value = 2 }`.
    Write,
}

/// The key of one access; checks its fields' wire types and its value's size.
fn key_of(bytes: &[u8], access: Access) -> Option<&[u8]> {
    let mut seen = [false; 3];
    let mut key: &[u8] = &[];
    let mut fields = Fields::of(bytes);
    while let Some((number, value)) = fields.next()? {
        once(&mut seen, number)?;
        match (access, number, value) {
            (_, 1, Value::Bytes(b)) => key = b,
            (Access::Read | Access::ReadWrite, 2, Value::Varint(_)) => {}
            (Access::ReadWrite, 3, Value::Bytes(b)) | (Access::Write, 2, Value::Bytes(b)) => {
                if b.len() > MAX_VALUE_LEN {
                    return None;
                }
            }
            _ => return None,
        }
    }
    Some(key)
}

/// Checks one namespace's `Endorsements`: at least one, each with a signature.
fn endorsements(bytes: &[u8]) -> Option<()> {
    let mut count = 0usize;
    let mut fields = Fields::of(bytes);
    while let Some((number, value)) = fields.next()? {
        let (1, Value::Bytes(b)) = (number, value) else {
            return None;
        };
        let mut seen = [false; 2];
        let mut signed = false;
        let mut inner = Fields::of(b);
        while let Some((n, v)) = inner.next()? {
            once(&mut seen, n)?;
            match (n, v) {
                (1, Value::Bytes(sig)) => signed = !sig.is_empty(),
                (2, Value::Bytes(id)) => {
                    identity(id)?;
                }
                _ => return None,
            }
        }
        if !signed {
            return None;
        }
        count = count.checked_add(1)?;
    }
    (count > 0).then_some(())
}

#[cfg(test)]
#[path = "plain_tests.rs"]
mod tests;
