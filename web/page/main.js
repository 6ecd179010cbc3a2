// Expel's browser client: the page does the I/O (one WebTransport session: a
// bidirectional stream for control, datagrams for inputs and snapshots), the clock
// (performance.now(), passed into every call) and the drawing; the WebAssembly client
// (web/src/lib.rs: the same client machine and core a native client runs) decides
// everything else. Its figures are published as window.expelStats for tests.
import init, { WebClient, sim_hash } from "/expel_web.js";

const stats = { state: "loading", player: null, tick: 0, snapshots_per_s: 0, corrections: 0,
                unexplained_corrections: 0, rtt_ms: 0, frame_ms: 0, sessions: 0 };
window.expelStats = stats;

const canvas = document.getElementById("view");
const ctx = canvas.getContext("2d");
const statusBox = document.getElementById("status");
const params = new URLSearchParams(location.search);
const token = params.get("token");
// A scripted walk for tests and demos: `?walk=square` turns a quarter every 1.5 s.
const walk = params.get("walk");

// The core's golden run in this browser: the map's bytes and the input file's text
// (JSON lines, as `expel sim --inputs` reads them) give the world's hash.
window.expelGolden = (mapBytes, jsonl) => {
  const nums = [];
  for (const line of jsonl.split("\n")) {
    if (!line.trim()) continue;
    const v = JSON.parse(line);
    nums.push(v.forward || 0, v.side || 0, v.up || 0, v.yaw || 0, v.pitch || 0,
              v.jump ? 1 : 0, v.crouch ? 1 : 0);
  }
  return sim_hash(new Uint8Array(mapBytes), new Float64Array(nums));
};

function show(text) {
  statusBox.textContent = text;
  statusBox.style.display = text ? "block" : "none";
}

function hexBytes(hex) {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.substr(i * 2, 2), 16);
  return out;
}

// Input: keys held, the mouse's place, buttons.
const keys = new Set();
let mouse = { x: 0, y: 0, fire: false, rocket: false };
addEventListener("keydown", (e) => { keys.add(e.code); if (e.code === "Space") e.preventDefault(); });
addEventListener("keyup", (e) => keys.delete(e.code));
addEventListener("blur", () => keys.clear());
canvas.addEventListener("mousemove", (e) => { mouse.x = e.clientX; mouse.y = e.clientY; });
canvas.addEventListener("mousedown", (e) => { if (e.button === 0) mouse.fire = true; else mouse.rocket = true; });
addEventListener("mouseup", (e) => { if (e.button === 0) mouse.fire = false; else mouse.rocket = false; });
canvas.addEventListener("contextmenu", (e) => e.preventDefault());

const view = { scale: 0.35, me: null };
let started = performance.now();

function command() {
  if (walk === "square") {
    const quarter = Math.floor((performance.now() - started) / 1500) % 4;
    return { forward: 1, side: 0, yaw: quarter * 90, jump: false, crouch: false, fire: false, rocket: false };
  }
  const held = (...c) => c.some((k) => keys.has(k));
  const forward = (held("KeyW", "ArrowUp") ? 1 : 0) - (held("KeyS", "ArrowDown") ? 1 : 0);
  const side = (held("KeyD", "ArrowRight") ? 1 : 0) - (held("KeyA", "ArrowLeft") ? 1 : 0);
  // Seen from above, the player faces the mouse.
  const dx = mouse.x - canvas.clientWidth / 2, dy = canvas.clientHeight / 2 - mouse.y;
  const yaw = ((Math.atan2(dy, dx) * 180) / Math.PI + 360) % 360;
  return { forward, side, yaw, jump: held("Space"), crouch: held("KeyC", "ControlLeft"),
           fire: mouse.fire, rocket: mouse.rocket };
}

async function readAll(readable, each) {
  const reader = readable.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    each(value);
  }
}

let plan = null;

async function play(door) {
  const url = `https://${location.hostname}:${door.port}${door.path}`;
  const options = door.cert_hash
    ? { serverCertificateHashes: [{ algorithm: "sha-256", value: hexBytes(door.cert_hash) }] }
    : {};
  const wt = new WebTransport(url, options);
  await wt.ready;
  stats.sessions += 1;
  const client = new WebClient(token, performance.now());
  const stream = await wt.createBidirectionalStream();
  const control = stream.writable.getWriter();
  const datagrams = wt.datagrams.writable.getWriter();
  let open = true;
  const flush = () => {
    let b;
    while ((b = client.take_control())) if (open) control.write(b).catch(() => {});
    while ((b = client.take_datagram())) if (open) datagrams.write(b).catch(() => {});
  };
  flush();
  const ended = new Promise((resolve) => {
    const gone = (code, reason) => {
      if (!open) return;
      open = false;
      client.handle_closed(code, reason);
      resolve();
    };
    readAll(stream.readable, (b) => { client.handle_control(b, performance.now()); flush(); })
      .catch(() => {})
      .finally(() => setTimeout(() => gone(-1, "control stream closed"), 300));
    readAll(wt.datagrams.readable, (b) => { client.handle_datagram(b, performance.now()); flush(); })
      .catch(() => {});
    wt.closed.then(
      (info) => gone(info && info.closeCode !== undefined ? info.closeCode : -1, (info && info.reason) || "closed"),
      (err) => gone(-1, String(err)));
  });
  // The machine's ticks, at the times it asks for (and every frame, in case a timer
  // comes late).
  let timer = null;
  const tick = () => {
    timer = null;
    const c = command();
    client.input(c.forward, c.side, c.yaw, 0, c.jump, c.crouch, c.fire, c.rocket);
    client.handle_timeout(performance.now());
    flush();
    const next = client.next_timeout_ms();
    if (open && !Number.isNaN(next)) timer = setTimeout(tick, Math.max(0, next - performance.now()));
  };
  const rtt = setInterval(async () => {
    try {
      const s = await wt.getStats();
      if (s && s.smoothedRtt) client.set_rtt_ms(s.smoothedRtt);
    } catch (_) { /* not every browser has getStats */ }
  }, 1000);
  const frame = () => {
    const t0 = performance.now();
    if (open && timer === null) tick();
    Object.assign(stats, JSON.parse(client.stats()));
    if (!plan && stats.state === "playing") {
      const p = client.plan();
      if (p) plan = JSON.parse(p);
    }
    draw(JSON.parse(client.frame(performance.now())));
    stats.frame_ms = Math.round((0.9 * stats.frame_ms + 0.1 * (performance.now() - t0)) * 1000) / 1000;
    if (open) requestAnimationFrame(frame);
  };
  requestAnimationFrame(frame);
  show("");
  await ended;
  clearInterval(rtt);
  if (timer !== null) clearTimeout(timer);
  try { wt.close(); } catch (_) { /* already closed */ }
  Object.assign(stats, JSON.parse(client.stats()));
  const transient = client.transient();
  client.free();
  return transient;
}

function draw(f) {
  const w = (canvas.width = canvas.clientWidth), h = (canvas.height = canvas.clientHeight);
  ctx.fillStyle = "#15171c";
  ctx.fillRect(0, 0, w, h);
  if (f.me) {
    // How far our player has been drawn moving, all told (the tests' walk).
    if (view.me) window.expelWalked = (window.expelWalked || 0) + Math.hypot(f.me[0] - view.me[0], f.me[1] - view.me[1]);
    view.me = f.me;
  }
  const c = view.me || (plan ? [(plan.bounds[0] + plan.bounds[2]) / 2, (plan.bounds[1] + plan.bounds[3]) / 2, 0] : [0, 0, 0]);
  const s = view.scale;
  const X = (x) => w / 2 + (x - c[0]) * s, Y = (y) => h / 2 - (y - c[1]) * s;
  if (plan) {
    const [, , , , zmin, zmax] = plan.bounds;
    for (const fl of plan.floors) {
      const shade = Math.round(40 + 60 * ((fl[0] - zmin) / Math.max(1, zmax - zmin)));
      ctx.fillStyle = `rgb(${shade},${shade + 4},${shade + 12})`;
      ctx.beginPath();
      for (let i = 1; i < fl.length; i += 2) (i === 1 ? ctx.moveTo : ctx.lineTo).call(ctx, X(fl[i]), Y(fl[i + 1]));
      ctx.fill();
    }
    ctx.strokeStyle = "#aab";
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    for (const [x0, y0, x1, y1] of plan.walls) { ctx.moveTo(X(x0), Y(y0)); ctx.lineTo(X(x1), Y(y1)); }
    ctx.stroke();
  }
  ctx.fillStyle = "#7a6a4a";
  for (const [x0, y0, x1, y1] of f.movers) ctx.fillRect(X(x0), Y(y1), (x1 - x0) * s, (y1 - y0) * s);
  const body = (x, y, color, yaw) => {
    ctx.fillStyle = color;
    ctx.beginPath();
    ctx.arc(X(x), Y(y), Math.max(4, 16 * s), 0, 2 * Math.PI);
    ctx.fill();
    if (yaw !== undefined) {
      const a = (yaw * Math.PI) / 180;
      ctx.strokeStyle = color;
      ctx.beginPath();
      ctx.moveTo(X(x), Y(y));
      ctx.lineTo(X(x + Math.cos(a) * 40), Y(y + Math.sin(a) * 40));
      ctx.stroke();
    }
  };
  for (const [id, x, y, , yaw] of f.others) body(x, y, id === f.it ? "#e8c840" : "#d05a5a", yaw);
  ctx.fillStyle = "#ff9a30";
  for (const [x, y] of f.rockets) { ctx.beginPath(); ctx.arc(X(x), Y(y), 4, 0, 2 * Math.PI); ctx.fill(); }
  if (f.me) body(f.me[0], f.me[1], stats.player === f.it ? "#e8c840" : "#5ad07a");
  // The scoreboard, and the game's messages.
  ctx.font = "13px system-ui, sans-serif";
  ctx.fillStyle = "#dde";
  let y = 20;
  const hits = f.game === "deathmatch" ? `  hits ${f.hits}` : "";
  ctx.fillText(`${f.game || "movement"}  tick ${stats.tick}  ${stats.snapshots_per_s} snapshots/s  rtt ${stats.rtt_ms} ms${hits}`, 10, y);
  for (const [id, points] of f.scores) {
    y += 16;
    ctx.fillStyle = id === stats.player ? "#5ad07a" : "#dde";
    ctx.fillText(`${id === f.it ? "* " : ""}player ${id}: ${points}`, 10, y);
  }
  ctx.fillStyle = "#ccd";
  f.lines.forEach((l, i) => ctx.fillText(l, 10, h - 30 - (f.lines.length - 1 - i) * 16));
}

async function main() {
  await init();
  if (!token) {
    stats.state = "refused";
    show("No token in the address: open this page as …/?token=TOKEN (expel token mints one).");
    return;
  }
  if (typeof WebTransport === "undefined") {
    stats.state = "ended";
    show("This browser has no WebTransport.");
    return;
  }
  const door = await (await fetch("/door.json")).json();
  let wait = 1000;
  for (;;) {
    stats.state = "connecting";
    show("Connecting…");
    let transient = true;
    try {
      transient = await play(door);
    } catch (e) {
      stats.reason = String(e);
    }
    const code = stats.code !== undefined && stats.code !== null ? ` (code ${stats.code})` : "";
    const why = `${stats.state === "refused" ? "Refused" : "Ended"}${code}: ${stats.reason || ""}`;
    if (!transient) {
      show(why);
      return;
    }
    // Worth trying again (the server full or restarting, the network): later, and
    // less often each time.
    show(`${why} — trying again in ${Math.round(wait / 1000)} s`);
    await new Promise((r) => setTimeout(r, wait));
    wait = Math.min(wait * 2, 30000);
  }
}

main().catch((e) => { stats.state = "ended"; stats.reason = String(e); show(String(e)); });
