// Showing a job: status, progress, metrics, and its output (text inline; images fetched with the API key, or
// straight from the presigned URL the job carries when the server hands out URLs: that one needs no key).

const $ = (id) => document.getElementById(id);

function el(tag, text, attrs = {}) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function ms(value) {
  if (value === null || value === undefined) return "–";
  return value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${Math.round(value)} ms`;
}

export function showStatus(job) {
  $("empty").hidden = true;
  $("job-view").hidden = false;
  $("job-id").textContent = job.id;
  const status = $("status");
  status.textContent = job.status;
  status.className = `status ${job.status}`;
  const bar = $("progress");
  const done = !["queued", "running"].includes(job.status);
  let note = "";
  if (job.progress && !done) {
    bar.max = job.progress.total;
    bar.value = job.progress.step;
    note = `step ${job.progress.step} of ${job.progress.total}`;
  } else if (done) {
    bar.max = 1;
    bar.value = 1;
  } else {
    bar.removeAttribute("value"); // indeterminate while queued
    note = job.status === "queued" ? "waiting for a worker" : "running";
  }
  const started = Date.parse(job.created_at);
  const ended = job.completed_at ? Date.parse(job.completed_at) : Date.now();
  const seconds = ((ended - started) / 1000).toFixed(1);
  $("progress-text").textContent = done ? `${job.status} ${seconds} s after it was submitted` : `${note} · ${seconds} s`;
  $("cancel").hidden = done;
}

// Text as the model writes it, before the job ends (the finished job's result replaces it).
export function showText(text) {
  const box = $("result");
  let pre = box.querySelector("pre.streaming");
  if (!pre) {
    pre = el("pre", "", { class: "streaming" });
    box.replaceChildren(pre);
  }
  pre.textContent = text;
}

export function showMetrics(job) {
  const list = $("metrics");
  list.replaceChildren();
  const m = job.metrics || {};
  const rows = [["model", `${job.model} (${job.kind})`], ["queue time", ms(m.queue_ms)],
    ["inference time", ms(m.inference_ms)], ["batch size", m.batch_size ?? "–"]];
  if (job.error) rows.push(["error", `${job.error.code}: ${job.error.message}`]);
  for (const [name, value] of rows) {
    const dd = el("dd", value);
    dd.dataset.metric = name.replace(/ /g, "_");
    list.append(el("dt", name), dd);
  }
}

function table(headers, rows) {
  const t = el("table");
  const head = el("tr");
  for (const h of headers) head.append(el("th", h));
  t.append(head);
  for (const row of rows) {
    const tr = el("tr");
    for (const cell of row) tr.append(el("td", cell));
    t.append(tr);
  }
  return t;
}

async function image(entry, n, job, fetchBlob) {
  const figure = el("figure");
  const img = el("img", null, { alt: `output ${n} of job ${job.id}` });
  const caption = el("figcaption", "loading…");
  figure.append(img, caption);
  // A presigned URL goes straight into the <img> (no API key, and no CORS rule needed on the bucket).
  const url = entry.download_url || URL.createObjectURL(await fetchBlob(entry.url));
  img.addEventListener("load", () => {
    const seed = entry.seed !== undefined && entry.seed !== null ? ` · seed ${entry.seed}` : "";
    caption.textContent = `${img.naturalWidth}×${img.naturalHeight}${seed} · `;
    caption.append(el("a", "download", { href: url, download: `${job.id}-${n}.png` }));
  }, { once: true });
  img.src = url;
  return figure;
}

// One renderer per ``display`` of a kind (tasks/kinds.py): the model's ``display`` in GET /v1/models picks it.
const DISPLAYS = {
  files: async (out, box, job, fetchBlob) => {
    for (const [n, entry] of out.entries()) box.append(await image(entry, n, job, fetchBlob));
  },
  candidates: (out, box) => {
    box.append(table(["token", "score", "sequence"], out.map((r) => [r.token_str, r.score.toFixed(4), r.sequence])));
  },
  text: (out, box) => {
    box.append(el("pre", out.text), el("p", `${out.tokens ?? "?"} tokens · seed ${out.seed ?? "–"}`, { class: "hint" }));
  },
  transcript: (out, box) => {
    box.append(el("pre", out.text));
    const at = (s) => `${Math.floor(s / 60)}:${(s % 60).toFixed(2).padStart(5, "0")}`;
    box.append(table(["start", "end", "text"], out.segments.map((s) => [at(s.start), at(s.end), s.text])));
    box.append(el("p", `${out.duration} s · ${out.windows} windows · ${out.language ?? "?"}`, { class: "hint" }));
  },
  ranking: (out, box) => {
    const rows = out.results.map((r) => [String(r.index), r.relevance_score.toFixed(4), r.document ?? ""]);
    box.append(table(["document", "relevance", "text"], rows));
  },
  vectors: (out, box) => {
    box.append(el("p", `${out.embeddings.length} embeddings of dimension ${out.dim}`));
    box.append(el("pre", out.embeddings.map((v) => `[${v.slice(0, 6).map((x) => x.toFixed(4)).join(", ")}, …]`).join("\n")));
  },
};

export async function showResult(job, fetchBlob, display) {
  const box = $("result");
  box.replaceChildren();
  if (job.status !== "succeeded") return;
  const render = DISPLAYS[display];
  if (render && job.output != null) {
    await render(job.output, box, job, fetchBlob);
  } else {
    box.append(el("pre", JSON.stringify(job.output, null, 2)));
  }
}
