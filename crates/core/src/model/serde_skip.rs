//! The spec's `skip_serializing_if` predicates: a flag or count at its default is left out of
//! the spec's JSON, so a spec that does not use a field serializes as before it existed.

pub(super) fn is_false(b: &bool) -> bool {
    !*b
}

pub(super) fn is_zero(n: &u64) -> bool {
    *n == 0
}
