//! Inputs batched change no result: the same players, the same commands, on a clean link,
//! sent one datagram a tick or one every other tick (each then carrying two new
//! commands), leave the server's world the same bits, with every command applied. The
//! clients keep the same lead in both (one datagram every other tick asks two ticks more
//! of it by itself), so both begin on the same tick.

use expel_core::MoveCommand;
use expel_protocol::conditioner::Impairment;
use expel_testkit::network::network_with;
use std::time::Duration;

/// The server's world hash after `secs` of four players running their circles, with
/// inputs sent `input_rate` times a second; and the commands applied and late.
fn world_after(input_rate: u32, secs: u64) -> (u64, u64, u64, u64) {
    let link = Impairment {
        delay_ms: 30.0,
        ..Impairment::default()
    };
    let mut net = network_with(4, link, 11, |s| s.input_rate = Some(input_rate));
    // The lead a datagram every other tick keeps (see `lead_buffer`), for both.
    let buffer = 2.0 + if input_rate == 60 { 2.0 } else { 0.0 };
    for i in 0..net.len() {
        net.client_mut(i).set_buffer_ticks(buffer);
    }
    net.run(Duration::from_secs(secs), &mut |i, c| {
        let yaw = (c.predicted_tick() as f64 * 3.0 + i as f64 * 90.0) % 360.0;
        MoveCommand::new(1.0, 0.0, 0.0, yaw, 0.0)
    });
    let sent: u64 = (0..net.len())
        .map(|i| net.client(i).stats().datagrams_out)
        .sum();
    let inputs = net.server().stats().inputs;
    (
        net.server().world().hash(),
        inputs.applied,
        inputs.late,
        sent,
    )
}

#[test]
fn thirty_input_datagrams_a_second_leave_the_world_as_sixty_do() {
    let (every_tick, applied_60, late_60, sent_60) = world_after(60, 8);
    let (every_other, applied_30, late_30, sent_30) = world_after(30, 8);
    eprintln!("60/s: {applied_60} applied, {late_60} late, {sent_60} sent; 30/s: {applied_30} applied, {late_30} late, {sent_30} sent");
    assert_eq!((late_60, late_30), (0, 0));
    assert!(applied_60 >= 4 * 60 * 6, "{applied_60} applied");
    assert_eq!(applied_30, applied_60);
    assert_eq!(every_other, every_tick, "the world after 8 s");
    // Half the datagrams (the hellos and goodbyes aside).
    assert!(sent_30 * 2 <= sent_60 + 40, "{sent_30} against {sent_60}");
}
