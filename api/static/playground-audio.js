// Audio input (speech-to-text models): choose a file (flac, mp3, mp4, m4a, ogg, wav, webm) or record from the
// microphone (MediaRecorder: webm or mp4, as the browser records). On submit it goes to POST /v1/uploads and the job
// names its upload id; the API reads the container whatever the label, and refuses what is not audio (422).

export const AUDIO_FIELDS = new Set(["audio"]);
const TYPES = ["audio/flac", "audio/mpeg", "audio/mp4", "audio/ogg", "audio/wav", "audio/webm", "audio/x-wav",
  "audio/x-m4a", "audio/m4a", "audio/mp3", "audio/x-flac", "audio/wave"];

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  node.append(...children);
  return node;
}

// The audio control: a file chooser, a record/stop button and a player of what will be sent (`.audio-input`).
export function audioControl() {
  const box = el("div", { class: "audio-input wide", "data-field": "audio" });
  const chooser = el("input", { type: "file", accept: "audio/*,.flac,.mp3,.mp4,.m4a,.ogg,.wav,.webm",
    "aria-label": "audio file" });
  const record = el("button", { type: "button", class: "link", text: "record", "data-role": "record" });
  const player = el("audio", { controls: "", "data-role": "player" });
  player.hidden = true;
  box.append(el("span", { text: "audio: " }), chooser, record, player);
  const state = { blob: null, recorder: null };
  box.audioState = state;
  const show = (blob) => {
    state.blob = blob;
    player.src = URL.createObjectURL(blob);
    player.hidden = false;
  };
  chooser.addEventListener("change", () => { if (chooser.files[0]) show(chooser.files[0]); });
  record.addEventListener("click", async () => {
    if (state.recorder) { state.recorder.stop(); return; }
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    const recorder = new MediaRecorder(stream);
    const parts = [];
    recorder.addEventListener("dataavailable", (e) => parts.push(e.data));
    recorder.addEventListener("stop", () => {
      stream.getTracks().forEach((t) => t.stop());
      state.recorder = null;
      record.textContent = "record";
      show(new Blob(parts, { type: recorder.mimeType.split(";")[0] || "audio/webm" }));
    });
    state.recorder = recorder;
    record.textContent = "stop";
    recorder.start();
  });
  return box;
}

// Upload the chosen or recorded audio with `upload(blob)` -> upload id: the job's `audio` input.
export async function audioInputs(container, upload) {
  const box = container.querySelector(".audio-input");
  const state = box && box.audioState;
  if (!state || !state.blob) return {};
  const type = TYPES.includes(state.blob.type) ? state.blob.type : "audio/mpeg"; // a label: the API reads the file
  return { audio: await upload(new Blob([state.blob], { type })) };
}
