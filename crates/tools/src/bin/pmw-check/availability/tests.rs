//! The availability judge's rules, on made-up deliveries.

use super::*;

fn stream(deliveries: Vec<(i64, i64)>) -> Stream {
    Stream {
        name: "ws 0".into(),
        silences: owed_silences(&deliveries, 1_000),
        deliveries,
        excused: Vec::new(),
    }
}

/// Trades every 300 ms, delivered 20 ms later, except those detected from 10 s to 13 s
/// (delivered at 13 s): 3 s of recovery from a fault at 10 s.
fn stalled_until_13s() -> Vec<(i64, i64)> {
    (0..100)
        .map(|i| i * 300)
        .map(|d| {
            (
                d,
                if (10_000..13_000).contains(&d) {
                    13_000
                } else {
                    d + 20
                },
            )
        })
        .collect()
}

#[test]
fn a_quick_recovery_passes_and_a_slow_one_breaks_the_budget() {
    let kill = [Done::test(Kind::LeaderKill9, 10_000, 10_000)];
    let slow = stalled_until_13s();
    let fast: Vec<(i64, i64)> = (0..100).map(|i| (i * 300, i * 300 + 20)).collect();
    assert!(!judge(&kill, &[stream(fast)], 10_000).failed());
    let j = judge(&kill, &[stream(slow)], 10_000);
    assert!(j.failed());
    assert_eq!(j.samples[0].recovery_ms, 13_000 - 10_000);
}

#[test]
fn a_leader_killed_with_no_standby_ready_is_judged_as_a_cold_restart() {
    // Recovered 3 s after the kill: over a warm takeover's 2 s, within a cold restart's 5 s,
    // and tabled apart.
    let at_3s = stalled_until_13s();
    let warm = [Done::test(Kind::LeaderKill9, 10_000, 10_000)];
    assert!(judge(&warm, &[stream(at_3s.clone())], 10_000).failed());
    let mut cold = Done::test(Kind::LeaderKill9, 10_000, 10_000);
    cold.cold = true;
    let j = judge(&[cold], &[stream(at_3s)], 10_000);
    assert!(!j.failed());
    assert_eq!(j.samples[0].kind, "leader kill -9 (no standby)");
    assert!(table(&j, 10_000).contains("| leader kill -9 (no standby) | 5000 |"));
}

#[test]
fn a_subscriber_with_no_trade_soon_after_is_not_charged_for_the_quiet() {
    let kill = [Done::test(Kind::LeaderKill9, 10_000, 10_000)];
    // Another subscriber sees a block at 10.2 s; this one's next trade is detected at
    // 15 s and delivered 20 ms later.
    let other = stream(vec![(10_200, 10_220)]);
    let quiet = stream(vec![(9_000, 9_020), (15_000, 15_020)]);
    let j = judge(&kill, &[other, quiet], 10_000);
    assert!(!j.failed());
    assert!(j.samples.iter().all(|s| s.recovery_ms == 220));
}

#[test]
fn a_fault_under_way_before_the_budget_ends_moves_the_deadline() {
    // A kill at 10 s (deadline 12 s) and a Postgres restart from 11 s to 20 s (deadline
    // 25 s): a recovery at 24 s passes both; at 26 s it breaks both.
    let faults = [
        Done::test(Kind::LeaderKill9, 10_000, 10_000),
        Done::test(Kind::PostgresRestart, 11_000, 20_000),
    ];
    let at = |r: i64| stream(vec![(10_100, r), (20_100, r), (r, r + 10)]);
    let j = judge(&faults, &[at(24_000)], 10_000);
    assert!(!j.failed(), "{}", table(&j, 10_000));
    assert!(j.samples.iter().any(|s| s.masked));
    assert!(judge(&faults, &[at(26_000)], 10_000).failed());
}

#[test]
fn a_fault_starting_during_a_deploy_answers_for_the_trades_it_held() {
    // A deploy from 10 s to 30 s (its own deadline: 1 s after its start) and a leader frozen
    // from 15 s to 22 s (no takeover): trades detected 15–22 s wait until 22.5 s.
    let faults = [
        Done::test(Kind::Deploy, 10_000, 10_000),
        Done::test(Kind::LeaderStop { secs: 7 }, 15_000, 22_000),
    ];
    let mut f = faults.clone();
    f[0].end_ms = 30_000;
    let held: Vec<(i64, i64)> = (0..150)
        .map(|i| i * 300)
        .map(|d| {
            (
                d,
                if (15_000..22_000).contains(&d) {
                    22_500
                } else {
                    d + 40
                },
            )
        })
        .collect();
    let j = judge(&f, &[stream(held.clone())], 10_000);
    assert!(!j.failed(), "{}", table(&j, 10_000));
    // Without the freeze, the same waits are the deploy's: over its 1 s.
    let j = judge(&f[..1], &[stream(held.clone())], 10_000);
    assert!(j.failed(), "{}", table(&j, 10_000));
    // A trade the deploy held before the freeze began is still the deploy's.
    let mut slow = held;
    slow[40].1 = slow[40].0 + 2_000;
    assert!((10_000..13_000).contains(&slow[40].0));
    let j = judge(&f, &[stream(slow)], 10_000);
    assert!(j.failed(), "{}", table(&j, 10_000));
}

#[test]
fn a_deploy_holds_webhooks_until_its_end_and_websockets_for_one_second() {
    // An RPC cut from 10 s to 15 s and a deploy from 13 s to 25 s: webhooks recover at 22 s
    // (a handover held them), WebSocket at 15.2 s.
    let mut deploy = Done::test(Kind::Deploy, 13_000, 13_000);
    deploy.end_ms = 25_000;
    let faults = [Done::test(Kind::RpcCut { secs: 5 }, 10_000, 15_000), deploy];
    let at = |r: i64| vec![(15_100, r), (16_000, r.max(16_020)), (26_000, 26_020)];
    let mut hook = stream(at(22_000));
    hook.name = "hook 0/hook".into();
    let j = judge(&faults, &[hook.clone(), stream(at(15_200))], 10_000);
    assert!(!j.failed(), "{}", table(&j, 10_000));
    // The same 7 s on a WebSocket stream break the cut's 3 s.
    let j = judge(&faults, &[stream(at(22_000))], 10_000);
    assert!(j.failed(), "{}", table(&j, 10_000));
    // And a webhook recovery after the deploy's end + 1 s breaks it too.
    hook.deliveries = at(26_500);
    let j = judge(&faults, &[hook], 10_000);
    assert!(j.failed(), "{}", table(&j, 10_000));
}

#[test]
fn a_clickhouse_stop_darkens_nothing_and_excuses_no_one() {
    let stop = Done::test(Kind::ClickHouseStop { secs: 10 }, 10_000, 20_000);
    let normal: Vec<(i64, i64)> = (0..100).map(|i| (i * 300, i * 300 + 40)).collect();
    assert!(!judge(
        std::slice::from_ref(&stop),
        &[stream(normal.clone())],
        10_000
    )
    .failed());
    // One trade detected during the stop waits 1.5 s: over the budget.
    let mut late = normal.clone();
    late[50].1 = late[50].0 + 1_500;
    assert!((10_000..=20_000).contains(&late[50].0));
    let j = judge(std::slice::from_ref(&stop), &[stream(late.clone())], 10_000);
    assert!(j.failed(), "{}", table(&j, 10_000));
    // ... unless its wait overlapped a leader kill: the kill's to answer for (2 s budget).
    let kill = Done::test(Kind::LeaderKill9, late[50].0 + 100, late[50].0 + 100);
    let both = [stop.clone(), kill];
    assert!(!judge(&both, &[stream(late)], 10_000).failed());
    // A kill during the stop is not excused by it: 3 s to recover breaks the kill's 2 s.
    let mut dark = normal;
    for t in dark.iter_mut().filter(|t| (12_000..15_000).contains(&t.0)) {
        t.1 = 15_000;
    }
    let faults = [stop, Done::test(Kind::LeaderKill9, 12_000, 12_000)];
    let j = judge(&faults, &[stream(dark)], 10_000);
    assert!(j.failed(), "{}", table(&j, 10_000));
    assert!(j.samples.iter().all(|s| !s.masked));
}

#[test]
fn a_deploy_is_judged_by_every_trade_it_overlapped_and_fails_when_it_failed() {
    let mut deploy = Done::test(Kind::Deploy, 10_000, 40_000);
    let ok: Vec<(i64, i64)> = (0..200).map(|i| (i * 300, i * 300 + 400)).collect();
    assert!(!judge(std::slice::from_ref(&deploy), &[stream(ok.clone())], 10_000).failed());
    let mut gap = ok.clone();
    gap[100].1 = gap[100].0 + 1_500;
    assert!(judge(
        std::slice::from_ref(&deploy),
        &[stream(gap.clone())],
        10_000
    )
    .failed());
    // A webhook endpoint may wait for the handover of attempts in flight (up to 11 s).
    let mut hook = stream(gap.clone());
    hook.name = "hook 0/hook".into();
    assert!(!judge(std::slice::from_ref(&deploy), &[hook.clone()], 10_000).failed());
    hook.deliveries[100].1 = hook.deliveries[100].0 + 12_000;
    assert!(judge(std::slice::from_ref(&deploy), &[hook], 10_000).failed());
    deploy.note = "exit status: 1: pmw-push-b did not come back as standby".into();
    let j = judge(&[deploy], &[stream(ok)], 10_000);
    assert!(j.failed() && j.failed_deploys.len() == 1);
}

#[test]
fn excused_windows_are_not_judged() {
    let kill = [Done::test(Kind::LeaderKill9, 10_000, 10_000)];
    let mut s = stream(vec![(10_100, 19_000)]);
    s.excused = vec![(9_000, 18_000)];
    let j = judge(&kill, &[s], 10_000);
    assert!(!j.failed());
    assert_eq!(j.unjudged.get("leader kill -9"), Some(&1));
    // The first trade after the excused window is judged instead (block seen at 10.1 s,
    // that trade delivered 20 ms after its detection).
    let mut s = stream(vec![(10_100, 19_000), (18_500, 18_520)]);
    s.excused = vec![(9_000, 18_000)];
    let j = judge(&kill, &[s], 10_000);
    assert!(j.unjudged.is_empty());
    assert_eq!(j.samples[0].recovery_ms, 120);
}

#[test]
fn owed_silences_count_only_time_a_detected_trade_waited() {
    // Nothing owed between 1 s and 5 s (the next trade is detected at 5 s): no silence;
    // a trade detected at 6 s and delivered at 9 s: 3 s of silence.
    let s = owed_silences(&[(0, 1_000), (5_000, 5_010), (6_000, 9_000)], 1_000);
    assert_eq!(s, vec![(6_000, 9_000)]);
    assert_eq!(union_ms([(0, 10), (5, 20), (30, 40)].into_iter()), 30);
}

#[test]
fn a_clickhouse_stop_during_a_nats_node_kill_leaves_the_kills_delay_to_the_kill() {
    let stop = Done::test(Kind::ClickHouseStop { secs: 10 }, 10_000, 20_000);
    let nats = Done::test(Kind::NatsKill { secs: 5 }, 12_000, 17_000);
    // A trade detected at 13 s waits 1.2 s: over the stop's 1 s, within the node kill's 3 s.
    let mut late: Vec<(i64, i64)> = (0..100).map(|i| (i * 300, i * 300 + 40)).collect();
    let k = late.iter().position(|t| t.0 >= 13_000).unwrap();
    late[k].1 = late[k].0 + 1_200;
    let j = judge(
        &[stop.clone(), nats.clone()],
        &[stream(late.clone())],
        10_000,
    );
    assert!(!j.failed(), "{}", table(&j, 10_000));
    // Without the node kill, the stop answers for it.
    assert!(judge(std::slice::from_ref(&stop), &[stream(late.clone())], 10_000).failed());
    // A 3.5 s wait breaks the node kill's own budget.
    late[k].1 = late[k].0 + 3_500;
    assert!(judge(&[stop, nats], &[stream(late)], 10_000).failed());
}

#[test]
fn a_fault_that_failed_before_striking_excuses_no_silence() {
    // A primary kill at 10 s (budget 15 s) after which trades stall until 70 s. A switchover
    // whose arm waited from 12 s to 72 s for a healthy cluster and never struck must neither
    // move the kill's deadline nor be named over the silence: the kill breaks its budget.
    let stall: Vec<(i64, i64)> = (0..400)
        .map(|i| i * 300)
        .map(|d| {
            (
                d,
                if (10_000..70_000).contains(&d) {
                    70_000
                } else {
                    d + 20
                },
            )
        })
        .collect();
    let kill = Done::test(Kind::PrimaryKill { secs: 0 }, 10_000, 10_000);
    let mut refused = Done::test(Kind::Switchover, 12_000, 72_000);
    refused.note = "failed: not healthy before the fault".into();
    refused.struck = false;
    let j = judge(
        &[kill.clone(), refused.clone()],
        &[stream(stall.clone())],
        10_000,
    );
    assert!(j.failed(), "{}", table(&j, 10_000));
    assert_eq!(j.samples.len(), 1);
    assert!(!j.silences[0].contains("switchover"), "{:?}", j.silences);
    // Had it struck, its window (to 72 s + 5 s) would have masked the kill's breach.
    refused.struck = true;
    let j = judge(&[kill, refused], &[stream(stall)], 10_000);
    assert!(!j.failed(), "{}", table(&j, 10_000));
    assert!(j.silences[0].contains("switchover"), "{:?}", j.silences);
}

#[test]
fn a_trade_detected_under_a_later_fault_is_not_the_earlier_ones_sample() {
    // A live restart ends at 10 s (deadline 13 s); client 0 is paused from 10.5 s (excused to
    // 14 s); a host partition begins at 15 s. Its first trade after the pause, detected at
    // 15.2 s under the partition, waits 7 s: the partition's, not the restart's.
    let mut trades: Vec<(i64, i64)> = (0..100).map(|i| (i * 300, i * 300 + 20)).collect();
    trades.retain(|&(d, _)| !(10_000..22_000).contains(&d));
    trades.push((15_200, 22_200));
    trades.sort_unstable();
    let mut paused = stream(trades.clone());
    paused.excused = vec![(10_500, 14_000)];
    let restart = Done::test(Kind::LiveRestart, 10_000, 10_000);
    let partition = Done::test(Kind::HostPartition { secs: 20 }, 15_000, 35_000);
    let others = stream((0..120).map(|i| (i * 300, i * 300 + 20)).collect());
    let j = judge(
        &[restart.clone(), partition],
        &[paused.clone(), others.clone()],
        10_000,
    );
    let restart_samples: Vec<_> = j
        .samples
        .iter()
        .filter(|s| s.kind == "live restart")
        .collect();
    assert!(
        restart_samples.iter().all(|s| !s.failed()),
        "{}",
        table(&j, 10_000)
    );
    // Without the partition the same wait is the restart's, and breaks its budget.
    let j = judge(&[restart], &[paused, others], 10_000);
    assert!(j.failed(), "{}", table(&j, 10_000));
}
