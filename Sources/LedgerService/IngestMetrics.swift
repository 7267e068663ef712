import AppStore
import LedgerStore

extension LedgerApp {
    /// What the ingest path's caches save, read at scrape time: the verifier's chain cache (a hit
    /// skips X.509 path validation, leaving one P-256 verify per JWS) and the live projection's
    /// fold snapshots (a hit refolds a subscription from its snapshot instead of all its facts).
    func describeIngestMetrics() {
        if let verifier = apple.ingestor?.verifier {
            metrics.gauge("ledger_apple_chain_cache_total", help: "Signed data verified with a cached certificate chain (hit) or a full path validation (miss)") {
                [(labels: ["result": "hit"], value: Double(verifier.cacheHitCount)),
                 (labels: ["result": "miss"], value: Double(verifier.chainValidationCount))]
            }
        }
        let store = self.store
        metrics.gauge("ledger_live_fold_total", help: "Subscriptions the live projection refolded from a snapshot (hit), from all their facts (miss), or in full because order facts may join them (full)") {
            let s = store.liveFoldStatistics
            return [(labels: ["result": "hit"], value: Double(s.hits)), (labels: ["result": "miss"], value: Double(s.misses)),
                    (labels: ["result": "full"], value: Double(s.fullRefolds))]
        }
        metrics.gauge("ledger_report_fold_total", help: "Subscriptions the reports' catch-up folded onto a live fold snapshot (snapshot) or from all their facts (full)") {
            let s = store.liveFoldStatistics
            return [(labels: ["result": "snapshot"], value: Double(s.reportSnapshotFolds)),
                    (labels: ["result": "full"], value: Double(s.reportFullFolds))]
        }
        metrics.gauge("ledger_apple_status_check_total", help: "Subscriptions whose new Apple statement the status checks' catch-up checked on a live fold snapshot (snapshot) or from all their facts (full)") {
            let s = store.liveFoldStatistics
            return [(labels: ["result": "snapshot"], value: Double(s.statusSnapshotChecks)),
                    (labels: ["result": "full"], value: Double(s.statusFullChecks))]
        }
        metrics.gauge("ledger_live_fold_snapshot_facts", help: "Facts held in the live projection's fold snapshots") {
            [(labels: [:], value: Double(store.liveFoldStatistics.facts))]
        }
    }
}
