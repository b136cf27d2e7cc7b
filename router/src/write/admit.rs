//! Who may write: every door (HTTP and gRPC) lets a write in here before
//! reading its points, and charges what it stored afterwards.

use super::WriteOutcome;
use crate::auth::{Access, Authorizer, Role};
use crate::error::Result;

/// The `write` role on `db`, then the token's write rate limit (429 with
/// Retry-After).
pub fn admit_write(auth: &Authorizer, presented: Option<&str>, db: &str) -> Result<Access> {
    let access = auth.authorize(presented, Role::Write, &[db])?;
    auth.admit_write(&access)?;
    Ok(access)
}

/// Charges the points a write stored to its token's point bucket.
pub fn charge_write(auth: &Authorizer, access: Access, res: &Result<WriteOutcome>) {
    if let Ok(outcome) = res {
        auth.charge_points(&access, outcome.summary.points as u64);
    }
}
