// The playground's chat tab: a conversation with a text-generation model. Each turn is a job whose input is the
// whole conversation (input.messages, rendered with the model's chat template); its answer streams in from the
// job's event stream (text events) and joins the history once the job is done.

import { followEvents } from "./playground-events.js";

const $ = (id) => document.getElementById(id);

function bubble(role, text) {
  const box = document.createElement("div");
  box.className = `bubble ${role}`;
  box.dataset.role = role;
  box.textContent = text;
  $("chat-log").append(box);
  box.scrollIntoView({ block: "end" });
  return box;
}

// api: { call(path, options), headers(), apiUrl(path), models() }
export function chatTab(api) {
  let history = [];
  let busy = false;

  function fillModels() {
    const select = $("chat-model");
    const previous = select.value;
    // Models whose input takes a conversation and whose tokenizer has a chat template (read from /v1/models).
    const text = api.models().filter((m) => m.input_schema.properties?.messages && m.limits.has_chat_template !== false);
    select.replaceChildren(...text.map((m) => new Option(m.id, m.id)));
    if (text.some((m) => m.id === previous)) select.value = previous;
  }

  function reset() {
    history = [];
    $("chat-log").replaceChildren();
    $("chat-error").hidden = true;
  }

  async function send(event) {
    event.preventDefault();
    const line = $("chat-input").value.trim();
    if (!line || busy) return;
    busy = true;
    $("chat-send").disabled = true;
    $("chat-error").hidden = true;
    const system = $("chat-system").value.trim();
    const turn = [...history, { role: "user", content: line }];
    const messages = system ? [{ role: "system", content: system }, ...turn] : turn;
    bubble("user", line);
    $("chat-input").value = "";
    const answer = bubble("assistant", "");
    try {
      const input = { messages, max_new_tokens: Number($("chat-max-tokens").value) || 64 };
      const job = await api.call("v1/jobs", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ model: $("chat-model").value, input }),
      });
      let text = "";
      const onEvent = (type, data) => {
        if (type !== "text" || (data.index || 0) !== 0) return;
        text = text.slice(0, data.offset) + data.text;
        answer.textContent = text;
      };
      let done = await followEvents(api.apiUrl(`v1/jobs/${job.id}/events`), api.headers(), onEvent, () => true);
      while (!done || !["succeeded", "failed", "canceled", "expired"].includes(done.status)) {
        await new Promise((r) => setTimeout(r, 500)); // no stream to follow: poll the job
        done = await api.call(`v1/jobs/${job.id}`);
      }
      if (done.status !== "succeeded") throw new Error(`job ${done.status}: ${done.error ? done.error.message : ""}`);
      const content = done.output.message ? done.output.message.content : done.output.text;
      answer.textContent = content;
      history = [...turn, { role: "assistant", content }];
    } catch (error) {
      answer.remove();
      $("chat-error").textContent = error.message;
      $("chat-error").hidden = false;
    } finally {
      busy = false;
      $("chat-send").disabled = false;
    }
  }

  $("chat-form").addEventListener("submit", send);
  $("chat-clear").addEventListener("click", reset);
  return { fillModels };
}
