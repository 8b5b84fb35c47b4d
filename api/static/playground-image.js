// Image inputs: drop or choose the source picture, then paint the inpainting mask over it with a brush (or
// choose a mask file, which lands on the same canvas and can be painted on). On submit both are sent to
// POST /v1/uploads and the job names their upload ids. White on the mask = repaint, the rest is kept.

export const IMAGE_FIELDS = new Set(["image", "mask"]);
const ACCEPT = ["image/png", "image/jpeg", "image/webp"];

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  node.append(...children);
  return node;
}

function fileInput(label) {
  const input = el("input", { type: "file", accept: ACCEPT.join(","), "aria-label": label });
  input.hidden = true;
  return input;
}

// The picture control (and, when the model takes one, the mask painted over it): a `.image-input` element.
export function imageControl(withMask, multiple = 8) {
  const box = el("div", { class: "image-input wide", "data-field": "image" });
  const chooser = fileInput("source image");
  const choose = el("button", { type: "button", class: "link", text: "choose a file" });
  const drop = el("div", { class: "drop", tabindex: "0", "data-role": "drop" },
    "image: drop a PNG, JPEG or WebP here, or ", choose, chooser);
  const picture = el("img", { alt: "source image", "data-role": "source" });
  const canvas = el("canvas", { "data-role": "mask", title: "paint the parts to repaint" });
  const stage = el("div", { class: "stage" }, picture, canvas);
  const remove = el("button", { type: "button", class: "link", text: "remove image", "data-role": "remove" });
  const tools = el("div", { class: "mask-tools" }, remove);
  stage.hidden = tools.hidden = true;
  box.append(drop, stage, tools);
  const state = { file: null, url: null, painted: false, brush: 24 };
  box.imageState = state;
  canvas.hidden = !withMask;

  if (withMask) {
    const size = el("input", { type: "range", min: "2", max: "128", value: String(state.brush),
      "aria-label": "brush size", "data-role": "brush" });
    size.addEventListener("input", () => { state.brush = Number(size.value); });
    const clear = el("button", { type: "button", class: "link", text: "clear mask", "data-role": "clear" });
    const maskFile = fileInput("mask image");
    const useFile = el("button", { type: "button", class: "link", text: "mask from a file" });
    clear.addEventListener("click", () => {
      canvas.getContext("2d").clearRect(0, 0, canvas.width, canvas.height);
      state.painted = false;
    });
    useFile.addEventListener("click", () => maskFile.click());
    maskFile.addEventListener("change", async () => {
      if (!maskFile.files[0]) return;
      const mask = await createImageBitmap(maskFile.files[0]);
      canvas.getContext("2d").drawImage(mask, 0, 0, canvas.width, canvas.height); // the picture's size
      state.painted = true;
    });
    tools.prepend(el("span", { class: "hint", text: "mask: paint what to repaint · brush " }), size, clear,
      useFile, maskFile);
    paintable(canvas, state);
  }

  const take = (file) => {
    if (!file || !ACCEPT.includes(file.type)) {
      drop.classList.add("invalid");
      drop.dataset.error = file ? `${file.type || "this file"} is not a PNG, JPEG or WebP` : "";
      return;
    }
    drop.classList.remove("invalid");
    if (state.url) URL.revokeObjectURL(state.url);
    state.file = file;
    state.url = URL.createObjectURL(file);
    state.painted = false;
    picture.onload = () => {
      canvas.width = picture.naturalWidth; // the mask is exactly the picture's size
      canvas.height = picture.naturalHeight;
      state.brush = Math.max(2, Math.round(picture.naturalWidth / 10));
      const range = tools.querySelector("[data-role=brush]");
      if (range) range.value = String(state.brush);
      sizeHints(box, [picture.naturalWidth, picture.naturalHeight].map((n) => Math.floor(n / multiple) * multiple));
    };
    picture.src = state.url;
    stage.hidden = tools.hidden = false;
    drop.firstChild.textContent = `image: ${file.name || "dropped"} · drop another, or `;
  };
  choose.addEventListener("click", () => chooser.click());
  chooser.addEventListener("change", () => take(chooser.files[0]));
  drop.addEventListener("dragover", (e) => {
    e.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    take(e.dataTransfer.files[0]);
  });
  remove.addEventListener("click", () => {
    if (state.url) URL.revokeObjectURL(state.url);
    Object.assign(state, { file: null, url: null, painted: false });
    chooser.value = "";
    stage.hidden = tools.hidden = true;
    drop.firstChild.textContent = "image: drop a PNG, JPEG or WebP here, or ";
    sizeHints(box, null);
  });
  return box;
}

// A blank width or height now means the picture's size (rounded down to the model's multiple): say so.
function sizeHints(box, size) {
  const form = box.closest("form");
  ["width", "height"].forEach((name, i) => {
    const input = form && form.querySelector(`[name=${name}]`);
    if (!input) return;
    input.dataset.modelDefault ??= input.placeholder;
    input.placeholder = size ? `${size[i]} (the image's)` : input.dataset.modelDefault;
  });
}

// Brush strokes in white on the transparent canvas (shown half-transparent over the picture).
function paintable(canvas, state) {
  let last = null;
  const at = (e) => {
    const r = canvas.getBoundingClientRect();
    return [(e.clientX - r.left) * canvas.width / r.width, (e.clientY - r.top) * canvas.height / r.height];
  };
  const stroke = (from, to) => {
    const ctx = canvas.getContext("2d");
    ctx.strokeStyle = ctx.fillStyle = "#fff";
    ctx.lineCap = ctx.lineJoin = "round";
    ctx.lineWidth = state.brush;
    ctx.beginPath();
    ctx.moveTo(...from);
    ctx.lineTo(...to);
    ctx.stroke();
    state.painted = true;
  };
  canvas.addEventListener("pointerdown", (e) => {
    canvas.setPointerCapture(e.pointerId);
    last = at(e);
    stroke(last, last);
  });
  canvas.addEventListener("pointermove", (e) => {
    if (last === null) return;
    const next = at(e);
    stroke(last, next);
    last = next;
  });
  for (const end of ["pointerup", "pointercancel"]) canvas.addEventListener(end, () => { last = null; });
}

// The mask as a PNG: the strokes in white on black, the picture's size.
function maskBlob(canvas) {
  const out = document.createElement("canvas");
  out.width = canvas.width;
  out.height = canvas.height;
  const ctx = out.getContext("2d");
  ctx.fillStyle = "#000";
  ctx.fillRect(0, 0, out.width, out.height);
  ctx.drawImage(canvas, 0, 0);
  return new Promise((resolve) => out.toBlob(resolve, "image/png"));
}

// Upload the picture and the painted mask (if any) with `upload(blob)` -> upload id: the job's inputs.
export async function imageInputs(container, upload) {
  const box = container.querySelector(".image-input");
  const state = box && box.imageState;
  if (!state || !state.file) return {};
  const inputs = { image: await upload(state.file) };
  const canvas = box.querySelector("canvas");
  if (state.painted && !canvas.hidden) inputs.mask = await upload(await maskBlob(canvas));
  return inputs;
}
