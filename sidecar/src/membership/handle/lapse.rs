//! The lapse policy, once this host can no longer prove its lease: a stateful host fences
//! (terminal) and withdraws its record once the turns it handed out are over; a worker-only
//! host rejoins under the same id.

use super::{Inner, Phase, bump};
use crate::membership::MembershipError;
use crate::membership::config::SelfFence;
use crate::membership::heartbeat::{FenceReason, LostCause};
use std::sync::atomic::Ordering;
use tracing::{debug, info, warn};

impl Inner {
    /// The lease lapsed (suspicion or proof of loss): fence a stateful host, send a worker-only
    /// host into the rejoin loop.
    pub(super) fn lapse(&self, reason: FenceReason) {
        let mut phase = self.phase.lock().expect("phase lock");
        if *phase != Phase::Serving {
            return;
        }
        if self.stateful {
            *phase = Phase::Fenced;
            drop(phase);
            bump(&self.counters.self_fences);
            warn!(%reason, "fenced: this host can no longer prove its membership; terminal");
            self.fence_tx.send_replace(Some(reason));
        } else {
            *phase = Phase::Lapsed;
            drop(phase);
            bump(&self.counters.rejoin_attempts);
            info!(%reason, "membership lapsed; worker-only host rejoins under the same id");
        }
        self.wake.notify_one();
    }

    /// What a write that ran into a lapse reports: a stateful host fenced, a worker-only one
    /// is rejoining.
    pub(super) fn lapse_error(&self, reason: FenceReason) -> MembershipError {
        if self.stateful {
            MembershipError::Fenced(reason)
        } else {
            MembershipError::Rejoining(reason)
        }
    }

    pub(super) fn check_and_lapse(&self) {
        if self.phase() == Phase::Serving
            && self.cfg.self_fence != SelfFence::Never
            && let Err(reason) = self.hb.check()
        {
            self.lapse(reason);
        }
    }

    pub(super) fn fenced_error(&self) -> MembershipError {
        MembershipError::Fenced(
            self.fence_tx
                .borrow()
                .clone()
                .unwrap_or(FenceReason::Lost(LostCause::Gone)),
        )
    }

    pub(super) async fn withdraw_after_fence(&self) {
        // Peers sweep our claims once the record is gone, so the turns we handed out must be
        // over first. Every not-after is at most TTL past its hand-out, and hand-outs stopped at
        // the fence: the cap only guards against a wall clock stepped far back.
        if let Some(hold) = self.withdraw_hold.get() {
            let cap = self.cfg.ttl + self.cfg.drift_margin;
            if tokio::time::timeout(cap, hold()).await.is_err() {
                warn!(
                    ?cap,
                    "turns still outstanding past the longest possible not-after; withdrawing"
                );
            }
        }
        let _w = self.writer.lock().await;
        let mut backoff = self.cfg.rejoin_backoff_initial();
        for _ in 0..8 {
            match tokio::time::timeout(self.cfg.write_timeout(), self.provider.withdraw()).await {
                Ok(Ok(())) => {
                    info!("fenced host withdrew its record");
                    return;
                }
                Ok(Err(e)) => debug!(error = %e, "withdraw after fence failed"),
                Err(_) => debug!("withdraw after fence timed out"),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.cfg.rejoin_backoff_max);
        }
        warn!("fenced host could not withdraw its record; peers will expire it");
    }

    pub(super) async fn rejoin(&self) {
        let mut backoff = self.cfg.rejoin_backoff_initial();
        loop {
            {
                let _w = self.writer.lock().await;
                if self.phase() != Phase::Lapsed {
                    return;
                }
                let descriptor = self.desired.lock().expect("desired lock").clone();
                // A fresh window, started before the write (as at the first join).
                self.hb.arm();
                self.hb.beat();
                let result = tokio::time::timeout(
                    self.cfg.write_timeout(),
                    self.provider.join(&descriptor, self.cfg.ttl),
                )
                .await;
                match result {
                    Ok(Ok(version)) => {
                        self.own_version.store(version, Ordering::SeqCst);
                        self.hb.confirmed();
                        let mut phase = self.phase.lock().expect("phase lock");
                        if *phase == Phase::Lapsed {
                            *phase = Phase::Serving;
                        }
                        drop(phase);
                        bump(&self.counters.rejoins);
                        info!("rejoined membership under the same id");
                        self.coalescer().nudge(None);
                        return;
                    }
                    Ok(Err(e)) => {
                        self.hb.failed();
                        debug!(error = %e, ?backoff, "rejoin failed");
                    }
                    Err(_) => {
                        self.hb.failed();
                        debug!(?backoff, "rejoin timed out");
                    }
                }
            }
            tokio::select! {
                biased;
                _ = tokio::time::sleep(backoff) => {}
                _ = self.wake.notified() => {}
            }
            backoff = (backoff * 2).min(self.cfg.rejoin_backoff_max);
        }
    }
}
