//! A client you can play: a window showing the map from above, with the embedded client
//! API underneath ([`expel_client::Session`]).
//!
//! ```text
//! cargo run --release -p expel-client --example play -- ADDR (--secret S | --token T) \
//!     --fingerprint F [--autopilot SECONDS] [--loss P --delay-ms MS --jitter-ms MS --duplicate P]
//! ```
//!
//! W/S move forward and back, A/D strafe, the player faces the mouse pointer (or turn with
//! the arrow keys), Space jumps, C crouches, Escape leaves. The window's title is the line
//! of figures: round trip, corrections, snapshots lost. The conditioner's flags add loss,
//! delay, jitter and duplication to the datagrams, to feel prediction under lag. With
//! `--autopilot` it plays itself for that long, prints a JSON summary line, and exits
//! (`--screenshot FILE.png` saves the last frame). Against a server playing tag it rings
//! "it" in yellow, draws the score in the top left corner (a bar of points per player)
//! and puts the chat in the title and on stderr; `--say TEXT` says a line. Against a
//! server playing deathmatch the left mouse button (or F) fires the gun and the right one
//! (or R) a rocket, the game's entities (rockets) are white dots, and the title shows your
//! health and frags (the game's state of your player).

use anyhow::{bail, Context, Result};
use clap::Parser;
use expel_client::{connect_blocking, ClientEvent, ConnectOptions, Delivered, Impairment, Trust};
use expel_core::movement::buttons;
use expel_core::{Contents, Hull, MoveCommand, PlayerId, Sim, TraceScratch};
use expel_modes::tag::{Say, TagNews, TagScore};
use expel_protocol::token;
use glam::DVec3;
use minifb::{Key, MouseButton, MouseMode, Window, WindowOptions};
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Parser)]
struct Args {
    /// The server's QUIC address.
    addr: SocketAddr,
    /// The server's token secret (a token is minted for --player).
    #[arg(long)]
    secret: Option<String>,
    /// A connect token.
    #[arg(long)]
    token: Option<String>,
    /// The server certificate's SHA-256 fingerprint.
    #[arg(long)]
    fingerprint: String,
    /// The player id to mint a token for (with --secret).
    #[arg(long, default_value_t = 1)]
    player: u32,
    /// Play by itself for this many seconds, print the summary and exit.
    #[arg(long)]
    autopilot: Option<f64>,
    /// Save the last frame as a PNG.
    #[arg(long)]
    screenshot: Option<std::path::PathBuf>,
    /// Window size in pixels (square).
    #[arg(long, default_value_t = 640)]
    size: usize,
    /// Datagram loss probability (0 to 1).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// One-way datagram delay, milliseconds.
    #[arg(long, default_value_t = 0.0)]
    delay_ms: f64,
    /// ± jitter on the delay, milliseconds.
    #[arg(long, default_value_t = 0.0)]
    jitter_ms: f64,
    /// Datagram duplication probability (0 to 1).
    #[arg(long, default_value_t = 0.0)]
    duplicate: f64,
    /// A chat line to say once joined (a tag server passes it to everyone).
    #[arg(long)]
    say: Option<String>,
}

/// The map seen from above: the height of the first surface under each pixel.
struct TopDown {
    min: DVec3,
    scale: f64,
    pixels: Vec<u32>,
}

/// How far the picture's column steps down through a roof or wall (units).
const ROOF_STEP: f64 = 4.0;

impl TopDown {
    /// Draws the map at `size` pixels square; `between` runs after every row (the session
    /// keeps playing while the picture is made).
    fn new(sim: &Sim, size: usize, between: &mut dyn FnMut()) -> TopDown {
        let b = sim.map().bounds();
        let extent = (b.max - b.min).truncate().max_element().max(1.0);
        let scale = extent / size as f64;
        let point = Hull::point();
        let mut s = TraceScratch::new();
        let (top, bottom) = (b.max.z - 1.0, b.min.z);
        let mut pixels = vec![0u32; size * size];
        for py in 0..size {
            between();
            for px in 0..size {
                let x = b.min.x + (px as f64 + 0.5) * scale;
                let y = b.max.y - (py as f64 + 0.5) * scale;
                // Down from the top, out of any roof or wall first: a trace that starts
                // inside solid goes no deeper, so it cannot pass through a roof.
                let mut z = top;
                while z > bottom
                    && sim
                        .map()
                        .position_solid(&point, DVec3::new(x, y, z), Contents::ALL, &mut s)
                {
                    z -= ROOF_STEP;
                }
                pixels[py * size + px] = if z <= bottom {
                    0x0020_2020 // solid all the way down: a wall or the outside
                } else {
                    let t = sim.map().sweep(
                        &point,
                        DVec3::new(x, y, z),
                        DVec3::new(x, y, bottom),
                        Contents::ALL,
                        &mut s,
                    );
                    if t.hit.is_some() {
                        // Higher floors lighter.
                        let h = (t.end.z - bottom) / (top - bottom).max(1.0);
                        let g = (60.0 + 170.0 * h.clamp(0.0, 1.0)) as u32;
                        ((g / 2) << 16) | (g << 8) | (g * 3 / 4)
                    } else {
                        0x0010_1018
                    }
                };
            }
        }
        TopDown {
            min: DVec3::new(b.min.x, b.max.y, 0.0),
            scale,
            pixels,
        }
    }

    fn to_screen(&self, p: DVec3) -> (i64, i64) {
        (
            ((p.x - self.min.x) / self.scale) as i64,
            ((self.min.y - p.y) / self.scale) as i64,
        )
    }

    fn to_world(&self, x: f32, y: f32) -> DVec3 {
        DVec3::new(
            self.min.x + f64::from(x) * self.scale,
            self.min.y - f64::from(y) * self.scale,
            0.0,
        )
    }
}

fn square(buf: &mut [u32], size: usize, (cx, cy): (i64, i64), r: i64, color: u32) {
    for y in cy - r..=cy + r {
        for x in cx - r..=cx + r {
            if (0..size as i64).contains(&x) && (0..size as i64).contains(&y) {
                buf[y as usize * size + x as usize] = color;
            }
        }
    }
}

fn line(buf: &mut [u32], size: usize, a: (i64, i64), b: (i64, i64), color: u32) {
    let n = (b.0 - a.0).abs().max((b.1 - a.1).abs()).max(1);
    for i in 0..=n {
        let p = (a.0 + (b.0 - a.0) * i / n, a.1 + (b.1 - a.1) * i / n);
        square(buf, size, p, 0, color);
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let token = match (&args.token, &args.secret) {
        (Some(t), _) => t.clone(),
        (None, Some(s)) => {
            let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
            let mut nonce = [0u8; 16];
            nonce[..8].copy_from_slice(&now.to_le_bytes());
            nonce[8..12].copy_from_slice(&std::process::id().to_le_bytes());
            let grant = token::Grant {
                player: PlayerId(args.player),
                expires: now + 3600,
                nonce,
                server: None,
            };
            token::mint(s.as_bytes(), &grant)
        }
        (None, None) => bail!("give --token or --secret"),
    };
    let opts = ConnectOptions::new(token, Trust::Fingerprint(args.fingerprint.clone()));
    let mut session = connect_blocking(args.addr, &opts)
        .with_context(|| format!("connecting to {}", args.addr))?;
    let link = Impairment {
        loss: args.loss,
        delay_ms: args.delay_ms,
        jitter_ms: args.jitter_ms,
        duplicate: args.duplicate,
    };
    session.set_link(link, u64::from(args.player));
    // Our rockets (deathmatch's) show the moment the trigger is pulled.
    session.set_launcher(Box::new(expel_modes::deathmatch::RocketLauncher::default()));
    let sim = session.sim.clone();
    let size = args.size.clamp(128, 2048);
    let map = TopDown::new(&sim, size, &mut || session.update(Instant::now()));
    let mut window = Window::new(
        &format!("expel: {}", session.welcome.map_name),
        size,
        size,
        WindowOptions::default(),
    )
    .context("opening the window")?;
    window.set_target_fps(120);
    session.update(Instant::now());
    let started = Instant::now();
    let snapshots0 = session.diagnostics().stats.predict.snapshots;
    let mut first: Option<DVec3> = None;
    let mut buf = vec![0u32; size * size];
    let mut yaw = 0.0f64;
    let mut wander = 0.0f64;
    let mut title_at = started;
    let mut score: Option<TagScore> = None;
    let (mut last_said, mut heard) = (String::new(), 0u64);
    if let Some(line) = &args.say {
        session
            .send(
                expel_client::Channel::Reliable,
                &Say(line.clone()),
                Instant::now(),
            )
            .context("saying the chat line")?;
    }
    while window.is_open() && !window.is_key_down(Key::Escape) {
        let now = Instant::now();
        if let Some(limit) = args.autopilot {
            if (now - started).as_secs_f64() >= limit {
                break;
            }
        }
        let me = session.display_origin();
        // The input: the keyboard and mouse, or the autopilot's wander.
        let cmd = if args.autopilot.is_some() {
            let t = (now - started).as_secs_f64();
            if t >= wander {
                wander = t + 1.5;
                yaw = (yaw + 100.0 + 37.0 * (t * 7.0).sin()) % 360.0;
            }
            MoveCommand::new(1.0, 0.0, 0.0, yaw, 0.0)
        } else {
            if let (Some(m), Some((mx, my))) = (me, window.get_mouse_pos(MouseMode::Clamp)) {
                let d = map.to_world(mx, my) - DVec3::new(m.x, m.y, 0.0);
                if d.truncate().length() > 8.0 {
                    yaw = libm::atan2(d.y, d.x).to_degrees().rem_euclid(360.0);
                }
            }
            if window.is_key_down(Key::Left) {
                yaw = (yaw + 3.0) % 360.0;
            }
            if window.is_key_down(Key::Right) {
                yaw = (yaw + 357.0) % 360.0;
            }
            let axis = |plus: Key, minus: Key| {
                f64::from(u8::from(window.is_key_down(plus)))
                    - f64::from(u8::from(window.is_key_down(minus)))
            };
            let mut c = MoveCommand::new(axis(Key::W, Key::S), axis(Key::D, Key::A), 0.0, yaw, 0.0);
            if window.is_key_down(Key::Space) {
                c.buttons |= buttons::JUMP;
            }
            if window.is_key_down(Key::C) {
                c.buttons |= buttons::CROUCH;
            }
            // Deathmatch's triggers (a server playing another game refuses and counts them).
            use expel_modes::deathmatch::actions;
            if window.get_mouse_down(MouseButton::Left) || window.is_key_down(Key::F) {
                c.actions |= actions::FIRE;
            }
            if window.get_mouse_down(MouseButton::Right) || window.is_key_down(Key::R) {
                c.actions |= actions::ROCKET;
            }
            c
        };
        session.input(cmd);
        session.update(now);
        first = first.or(session.local_player().map(|p| p.origin()));
        while let Some(e) = session.poll_event() {
            if let ClientEvent::Ended(end) = e {
                eprintln!("session ended: {}", end.reason());
            }
        }
        // A server playing tag sends its score whenever it changes, and the chat.
        while let Some(Delivered { message: news, .. }) = session.poll_message::<TagNews>() {
            match news {
                TagNews::Score(s) => score = Some(s),
                TagNews::Said { from, line } => {
                    eprintln!("{from}: {line}");
                    last_said = format!("  {from}: {line}");
                    heard += 1;
                }
            }
        }
        if matches!(session.status(), expel_client::Status::Ended(_)) {
            break;
        }
        // Draw: the map, the movers, the others, us with our heading.
        buf.copy_from_slice(&map.pixels);
        let mut poses = Vec::new();
        sim.poses(session.movers(), &mut poses);
        for (m, pose) in sim.movers().iter().zip(&poses) {
            let b = m.world_bounds(pose);
            let (a, c) = (map.to_screen(b.min), map.to_screen(b.max));
            for (p, q) in [
                ((a.0, a.1), (c.0, a.1)),
                ((c.0, a.1), (c.0, c.1)),
                ((c.0, c.1), (a.0, c.1)),
                ((a.0, c.1), (a.0, a.1)),
            ] {
                line(&mut buf, size, p, q, 0x0040_80ff);
            }
        }
        // The others facing their way (a crouching one drawn smaller; "it", at tag, ringed
        // in yellow).
        let it = score.as_ref().and_then(|s| s.it);
        for (id, d) in session.others_drawn(now) {
            let at = map.to_screen(d.origin);
            if Some(id) == it {
                square(&mut buf, size, at, 7, 0x00ff_e14d);
            }
            let dir = DVec3::new(d.yaw.to_radians().cos(), d.yaw.to_radians().sin(), 0.0);
            line(
                &mut buf,
                size,
                at,
                map.to_screen(d.origin + dir * 48.0),
                0x00ff_a0a0,
            );
            square(
                &mut buf,
                size,
                at,
                if d.crouched { 2 } else { 3 },
                0x00ff_4040,
            );
        }
        // The game's entities (deathmatch's rockets), interpolated like the others.
        for e in session.entities(now).values() {
            square(&mut buf, size, map.to_screen(e.origin), 2, 0x00ff_ffff);
        }
        // Our own, predicted: from the moment the trigger is pulled.
        for l in session.launched().iter().filter(|l| l.twin.is_none()) {
            square(&mut buf, size, map.to_screen(l.origin), 2, 0x00ff_ffff);
        }
        if let Some(m) = me {
            let at = map.to_screen(m);
            let dir = DVec3::new(yaw.to_radians().cos(), yaw.to_radians().sin(), 0.0);
            line(
                &mut buf,
                size,
                at,
                map.to_screen(m + dir * 64.0),
                0x00ff_ffff,
            );
            square(&mut buf, size, at, 5, 0x00ff_ff40);
        }
        if let Some(s) = &score {
            draw_score(&mut buf, size, s, session.welcome.player);
        }
        if now >= title_at {
            title_at = now + Duration::from_millis(250);
            let st = session.diagnostics().stats;
            let me_id = session.welcome.player;
            let tag = score.as_ref().map_or(String::new(), |s| {
                let mine = s
                    .scores
                    .iter()
                    .find(|(p, _)| *p == me_id)
                    .map_or(0, |p| p.1);
                let who = if s.it == Some(me_id) {
                    "you are it".to_string()
                } else {
                    format!("it: {}", s.it.unwrap_or(PlayerId(0)))
                };
                format!("  tag: {who}, your points {mine}, passes {}", s.passes)
            }) + &last_said;
            let fighter = session
                .player_state::<expel_modes::deathmatch::FighterState>(me_id)
                // Tag's server names no fighter: nothing to show.
                .ok()
                .flatten()
                .map_or(String::new(), |f| {
                    format!("  health {}  frags {}", f.health, f.frags)
                });
            let tag = tag + &fighter;
            window.set_title(&format!(
                "expel: {}  rtt {:.0} ms  corrections {}  snapshots lost {}  loss {:.0}%  delay {:.0}±{:.0} ms{tag}",
                session.welcome.map_name,
                st.rtt * 1000.0,
                st.predict.corrections,
                st.snapshots_lost,
                args.loss * 100.0,
                args.delay_ms,
                args.jitter_ms,
            ));
        }
        window
            .update_with_buffer(&buf, size, size)
            .context("drawing the window")?;
    }
    if let Some(path) = &args.screenshot {
        save_png(path, &buf, size).with_context(|| format!("writing {}", path.display()))?;
    }
    // What it measured, as one JSON line.
    let st = session.diagnostics().stats;
    let secs = started.elapsed().as_secs_f64().max(1e-3);
    let last = session.local_player().map(|p| p.origin());
    let summary = serde_json::json!({
        "snapshots_per_s": (st.predict.snapshots - snapshots0) as f64 / secs,
        "moved": first.zip(last).map_or(0.0, |(a, b)| (b - a).length()),
        "corrections": st.predict.corrections,
        "chat_heard": heard,
        "rtt_ms": session.diagnostics().transport.rtt.as_secs_f64() * 1000.0,
    });
    println!("{summary}");
    session.close_blocking("done");
    Ok(())
}

/// The tag score in the top left corner: a row per player (the ten best), a swatch
/// (yellow for "it", white for us, red for the rest) and a bar as long as its points.
fn draw_score(buf: &mut [u32], size: usize, s: &TagScore, me: PlayerId) {
    let mut rows: Vec<&(PlayerId, u32)> = s.scores.iter().collect();
    rows.sort_by_key(|(p, points)| (std::cmp::Reverse(*points), *p));
    for (k, (player, points)) in rows.into_iter().take(10).enumerate() {
        let y = 8 + k * 10;
        let colour = if s.it == Some(*player) {
            0x00ff_e14d
        } else if *player == me {
            0x00ff_ffff
        } else {
            0x00ff_4040
        };
        let bar = (*points as usize * 6).min(size / 2);
        for dy in 0..6 {
            let row = (y + dy).min(size - 1) * size;
            for x in 8..14 {
                buf[row + x] = colour;
            }
            for x in 18..(18 + bar).min(size) {
                buf[row + x] = 0x00d0_d0d0;
            }
        }
    }
}

/// The frame as an RGB PNG.
fn save_png(path: &std::path::Path, buf: &[u32], size: usize) -> Result<()> {
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut enc = png::Encoder::new(file, size as u32, size as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header()?;
    let rgb: Vec<u8> = buf
        .iter()
        .flat_map(|p| [(p >> 16) as u8, (p >> 8) as u8, *p as u8])
        .collect();
    w.write_image_data(&rgb)?;
    Ok(())
}
