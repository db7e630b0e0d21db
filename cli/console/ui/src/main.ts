// Palyra console: a single page over the console's JSON API (cli/console).
// Views are rebuilt from data on every refresh; every string from the
// cluster goes into the page as text, never as HTML.
import QRCode from "qrcode";
import "./style.css";

type Dict<T> = { [k: string]: T };
type Any = Dict<any>;

const app = document.getElementById("app")!;
const conn = document.getElementById("conn")!;
const clusterLabel = document.getElementById("cluster")!;

// h builds an element: h("td", {class: "x"}, "text", child…).
function h(tag: string, attrs: Dict<any> = {}, ...children: (Node | string | number | null | undefined | false)[]): HTMLElement {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(typeof c === "object" ? c : String(c));
  }
  return el;
}

class APIError extends Error {
  hint: string;
  constructor(msg: string, hint: string) {
    super(msg);
    this.hint = hint;
  }
}

async function api(path: string, init?: RequestInit): Promise<Any> {
  const r = await fetch(path, { credentials: "same-origin", ...init });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new APIError(body.message || r.statusText, body.hint || "");
  return body;
}

const num = (v: unknown) => Number(v ?? 0);
const phaseName = (p: string | undefined) => (p || "JOB_PHASE_UNSPECIFIED").replace("JOB_PHASE_", "").toLowerCase();
const terminal = (p: string) => ["completed", "failed", "aborted", "expired", "cancelled"].includes(p);
const when = (ms: unknown) => (num(ms) ? new Date(num(ms)).toLocaleTimeString() : "");
const badge = (phase: string) => h("span", { class: `badge ${phase}` }, phase);

function decode(b64: string | undefined): string {
  if (!b64) return "";
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new TextDecoder().decode(bytes);
}

function table(head: string[], rows: (Node | string | number | null | false)[][], cls = ""): HTMLElement {
  return h("table", { class: cls },
    h("thead", {}, h("tr", {}, ...head.map((c) => h("th", {}, c)))),
    h("tbody", {}, ...rows.map((r) => h("tr", {}, ...r.map((c) => h("td", {}, c))))));
}

function errorBox(e: unknown): HTMLElement {
  const err = e as APIError;
  return h("div", { class: "error" }, String(err.message || e), err.hint ? h("div", { class: "hint" }, err.hint) : null);
}

// chart draws one series as an SVG line with its latest value.
function chart(title: string, points: [number, number][], unit: string): HTMLElement {
  const w = 420, hgt = 120, pad = 4;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${hgt}`);
  svg.setAttribute("class", "chart");
  if (points.length > 1) {
    const t0 = points[0][0], t1 = points[points.length - 1][0];
    const vmax = Math.max(1, ...points.map((p) => p[1]));
    const xy = points.map(([t, v]) => [pad + ((t - t0) / Math.max(1, t1 - t0)) * (w - 2 * pad), hgt - pad - (v / vmax) * (hgt - 2 * pad)]);
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", xy.map((p) => p.join(",")).join(" "));
    svg.append(line);
  }
  const last = points.length ? points[points.length - 1][1] : 0;
  return h("div", { class: "card" }, h("div", { class: "label" }, title), h("div", { class: "value" }, `${Math.round(last * 10) / 10} ${unit}`), svg);
}

function nodesTable(nodes: Any[]): HTMLElement {
  return table(["node", "address", "state", "raft", "capacity", "running", "scheduling", "labels"],
    nodes.map((n) => [
      h("code", {}, n.id), n.address, h("span", { class: `state ${n.state}` }, n.state),
      n.leader ? "leader" : n.voter ? "voter" : n.in_raft ? "non-voter" : "",
      Object.entries(n.capacity || {}).map(([k, v]) => `${k} ${v}`).join(", "),
      num(n.running),
      n.draining ? "draining" : n.eligible === false ? "ineligible" : "eligible",
      Object.entries(n.labels || {}).filter(([k]) => !k.startsWith("palyra.")).map(([k, v]) => `${k}=${v}`).join(" "),
    ]), "nodes");
}

function jobsTable(jobs: Any[]): HTMLElement {
  return table(["job", "kind", "phase", "node", "attempt", "submitted", "waiting for"],
    jobs.map((j) => {
      const p = phaseName(j.phase);
      return [h("a", { href: `#/jobs/${j.id}` }, h("code", {}, j.id)), j.kind, badge(p), j.node_id || "", num(j.attempt),
        when(j.submitted_at_ms), p === "queued" ? j.pending_reason || "" : ""];
    }), "jobs");
}

async function overview(): Promise<HTMLElement> {
  const [o, series, jobs] = await Promise.all([api("api/overview"), api("api/series"), api("api/jobs")]);
  const st = o.status || {};
  clusterLabel.textContent = `${st.cluster_name || ""} · leader ${st.leader_id || "none"} · via ${o.reached || st.node_id}`;
  const by: Dict<string> = st.jobs_by_phase || {};
  const samples: Any[] = series.samples || [];
  const thr: [number, number][] = [], queued: [number, number][] = [];
  for (let i = 0; i < samples.length; i++) {
    const s = samples[i];
    queued.push([s.at_ms, num(s.by_phase?.queued)]);
    if (i > 0) {
      const p = samples[i - 1];
      const done = (x: Any) => num(x.by_phase?.completed) + num(x.by_phase?.failed);
      thr.push([s.at_ms, Math.max(0, (done(s) - done(p)) / ((s.at_ms - p.at_ms) / 1000))]);
    }
  }
  const nodes: Any[] = o.nodes?.nodes || [];
  return h("div", {},
    h("section", { class: "cards" },
      h("div", { class: "card" }, h("div", { class: "label" }, "nodes alive"), h("div", { class: "value", id: "alive" }, `${nodes.filter((n) => n.state === "alive").length} / ${nodes.length}`)),
      ...["queued", "running", "completed", "failed"].map((p) => h("div", { class: "card" }, h("div", { class: "label" }, p), h("div", { class: "value" }, num(by[p]))))),
    h("section", { class: "cards charts" },
      chart("throughput", thr, "jobs/s"),
      chart("queue depth", queued, "queued")),
    h("h2", {}, "Nodes"), nodesTable(nodes),
    h("h2", {}, "Recent jobs"), jobsTable((jobs.jobs || []).slice(0, 10)));
}

async function jobsView(): Promise<HTMLElement> {
  const jobs = await api("api/jobs");
  return h("div", {}, h("h2", {}, "Jobs (newest first)"), jobsTable(jobs.jobs || []));
}

async function jobView(id: string): Promise<HTMLElement> {
  const r = await api(`api/jobs/${encodeURIComponent(id)}`);
  if (r.array) {
    const a = r.array;
    return h("div", {}, h("h2", {}, "Job array ", h("code", {}, a.id)),
      table(["phase", "tasks"], Object.entries(a.counts || {}).filter(([, v]) => num(v) > 0).map(([k, v]) => [badge(k), num(v)])),
      h("p", { class: "muted" }, `${num(a.size)} tasks${a.done ? ", all ended" : ""}`));
  }
  const j = r.job;
  const p = phaseName(j.phase);
  const rows: [string, Node | string | number][] = [
    ["phase", badge(p)], ["kind", j.kind], ["node", j.node_id || ""], ["attempt", num(j.attempt)],
    ["submitted", when(j.submitted_at_ms)], ["started", when(j.started_at_ms)], ["finished", when(j.finished_at_ms)],
    ["submitter", j.submitter || ""],
  ];
  if (j.fuel_used) rows.push(["fuel used", num(j.fuel_used)]);
  if (p === "queued" && j.pending_reason) rows.push(["waiting for", j.pending_reason]);
  const cancel = terminal(p) ? null : h("button", {
    onclick: async () => {
      if (!confirm(`Cancel ${j.id}?`)) return;
      await api(`api/jobs/${encodeURIComponent(j.id)}/cancel`, { method: "POST" }).catch((e) => alert(e.message));
      render();
    },
  }, "Cancel job");
  const artifacts: Any[] = j.artifacts || [];
  return h("div", {},
    h("h2", {}, "Job ", h("code", {}, j.id)),
    table(["", ""], rows.map(([k, v]) => [k, v]), "kv"),
    j.error ? h("div", { class: "error" }, `${j.error.code}: ${j.error.message}`, j.error.hint ? h("div", { class: "hint" }, j.error.hint) : null) : null,
    cancel,
    h("h3", {}, "stdout"), h("pre", { class: "out" }, decode(j.stdout) || (terminal(p) ? "(empty)" : "(follow it live: palyra job logs -f " + j.id + ")")),
    j.stderr ? h("h3", {}, "stderr") : null, j.stderr ? h("pre", { class: "out err" }, decode(j.stderr)) : null,
    artifacts.length ? h("h3", {}, "Artifacts") : null,
    ...artifacts.map((a) => {
      const url = `api/jobs/${encodeURIComponent(j.id)}/artifacts/${encodeURIComponent(a.name)}`;
      return h("div", { class: "artifact" }, h("a", { href: url, download: a.name }, `${a.name} (${a.media_type}, ${num(a.size)} bytes)`),
        a.media_type === "image/png" ? h("img", { src: url, alt: a.name }) : null);
    }));
}

let lastCode: Any | null = null;

async function pairingView(): Promise<HTMLElement> {
  const list = await api("api/pairings");
  const kind = h("select", {}, h("option", { value: "device" }, "device (a laptop)"), h("option", { value: "node" }, "node (a machine)")) as HTMLSelectElement;
  const op = h("input", { type: "checkbox" }) as HTMLInputElement;
  const form = h("div", { class: "form" }, "New code for a ", kind, h("label", {}, op, " operator (may administer the cluster)"),
    h("button", {
      onclick: async () => {
        try {
          lastCode = await api("api/pairings", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ kind: kind.value, operator: op.checked }) });
        } catch (e) {
          lastCode = { error: e };
        }
        render();
      },
    }, "Create code"));
  let shown: HTMLElement | null = null;
  if (lastCode?.error) shown = errorBox(lastCode.error);
  else if (lastCode) {
    const k = lastCode.pairing?.kind;
    const cmd = k === "node"
      ? `palyra node join --code ${lastCode.code} --peer ${lastCode.peer}`
      : `palyra device pair --code ${lastCode.code} --peer ${lastCode.peer}`;
    const img = h("img", { class: "qr", alt: "pairing code as a QR code" });
    QRCode.toDataURL(lastCode.code, { margin: 1, width: 220 }).then((u: string) => img.setAttribute("src", u));
    shown = h("div", { class: "card code" }, h("div", { class: "label" }, `one-time ${k} code, expires ${when(lastCode.pairing?.expires_at_ms)}`),
      h("pre", {}, lastCode.code), img, h("div", { class: "label" }, "on the machine to pair:"), h("pre", {}, cmd));
  }
  const pairings: Any[] = list.pairings || [];
  return h("div", {}, h("h2", {}, "Pairing"), form, shown,
    h("h3", {}, "Codes"),
    table(["id", "kind", "operator", "state", "created by", "expires", "used by"],
      pairings.map((p) => [h("code", {}, p.id), p.kind, p.operator ? "yes" : "", p.state, p.created_by || "", when(p.expires_at_ms), p.used_by || ""])));
}

async function devicesView(): Promise<HTMLElement> {
  const d = await api("api/devices");
  const devices: Any[] = d.devices || [];
  return h("div", {}, h("h2", {}, "Devices"),
    table(["device", "name", "operator", "added", "by", "state", ""],
      devices.map((m) => [h("code", {}, m.id), m.name || "", m.operator ? "yes" : "", when(m.added_at_ms), m.added_by || "",
        m.revoked ? "revoked" : "active",
        m.revoked ? "" : h("button", {
          onclick: async () => {
            if (!confirm(`Revoke ${m.id}? Every node refuses it from then on.`)) return;
            await api(`api/devices/${encodeURIComponent(m.id)}/revoke`, { method: "POST" }).catch((e) => alert(e.message));
            render();
          },
        }, "Revoke")])));
}

async function policyView(): Promise<HTMLElement> {
  const p = await api("api/policy");
  return h("div", {}, h("h2", {}, `Policy ${p.is_default ? "(default)" : "v" + num(p.version)}`),
    h("p", { class: "muted" }, "Change it with 'palyra policy set FILE'."), h("pre", { class: "out" }, p.source || ""));
}

function route(): () => Promise<HTMLElement> {
  const hash = location.hash.replace(/^#\/?/, "");
  const [section, id] = hash.split("/");
  switch (section) {
    case "jobs":
      return id ? () => jobView(decodeURIComponent(id)) : jobsView;
    case "pairing":
      return pairingView;
    case "devices":
      return devicesView;
    case "policy":
      return policyView;
  }
  return overview;
}

let rendering = false;
async function render() {
  if (rendering) return;
  rendering = true;
  try {
    const view = await route()();
    app.replaceChildren(view);
    conn.textContent = `updated ${new Date().toLocaleTimeString()}`;
    conn.className = "muted";
  } catch (e) {
    conn.textContent = "not connected";
    conn.className = "bad";
    app.replaceChildren(errorBox(e));
  } finally {
    rendering = false;
  }
}

// Live views refresh every second; forms (pairing) only on demand, so a
// half-filled form is not rebuilt under the user's hands.
window.addEventListener("hashchange", () => {
  lastCode = null;
  render();
});
setInterval(() => {
  const section = location.hash.replace(/^#\/?/, "").split("/")[0];
  if (!["pairing", "devices", "policy"].includes(section)) render();
}, 1000);
render();
