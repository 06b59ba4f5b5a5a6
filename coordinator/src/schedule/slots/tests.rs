use super::*;

fn row(last: Option<f64>, catch_up: bool) -> ScheduleRow {
    ScheduleRow {
        id: 1,
        name: "nightly".into(),
        cron: "0 3 * * *".into(),
        spec: serde_json::json!({}),
        catch_up,
        created_at: 0.0,
        last_slot: last,
    }
}

#[test]
fn due_fires_on_time_once_and_catches_up_once() {
    let cron: Cron = "0 3 * * *".parse().unwrap();
    let cfg = DaemonConfig::default();
    let day = 86_400.0;
    let slot1 = 3.0 * 3600.0 + 10.0 * day; // day 10, 03:00
    // Before the slot: nothing.
    assert_eq!(
        due(&row(Some(slot1 - day), true), &cron, slot1 - 60.0, &cfg),
        Due::Nothing
    );
    // At the slot and shortly after: fire.
    assert_eq!(
        due(&row(Some(slot1 - day), true), &cron, slot1 + 5.0, &cfg),
        Due::Fire(slot1)
    );
    // Once fired, not again.
    assert_eq!(
        due(&row(Some(slot1), true), &cron, slot1 + 30.0, &cfg),
        Due::Nothing
    );
    // Down for three days: the latest missed slot fires once, with catch-up.
    let later = slot1 + 3.0 * day + 7.0 * 3600.0;
    assert_eq!(
        due(&row(Some(slot1), true), &cron, later, &cfg),
        Due::Fire(slot1 + 3.0 * day)
    );
    // Without catch-up it is passed over.
    assert_eq!(
        due(&row(Some(slot1), false), &cron, later, &cfg),
        Due::Pass(slot1 + 3.0 * day)
    );
    let off = DaemonConfig {
        catch_up: false,
        ..cfg
    };
    assert_eq!(
        due(&row(Some(slot1), true), &cron, later, &off),
        Due::Pass(slot1 + 3.0 * day)
    );
}
