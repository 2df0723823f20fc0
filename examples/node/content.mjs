// Reading a message's content by its content type, as the Python client reads it; shared by
// pg_example.mjs and postgresjs_example.mjs.

// A content type's lower-case media type and its parameters: "text/plain; charset=ISO-8859-1"
// gives { kind: "text/plain", params: { charset: "ISO-8859-1" } }. Media types are
// case-insensitive (RFC 9110), so "Application/JSON" is JSON too; a semicolon inside a quoted
// value does not start a parameter (name="a;charset=x" names no charset), as in the Python client.
export function mediaType(contentType) {
  const items = [""];
  let quoted = false, escaped = false;
  for (const char of contentType ?? "") {
    if (char === ";" && !quoted) { items.push(""); continue; }
    if (escaped) escaped = false;
    else if (quoted && char === "\\") escaped = true;
    else if (char === '"') quoted = !quoted;
    items[items.length - 1] += char;
  }
  const [head, ...rest] = items;
  const params = {};
  for (const item of rest) {
    const at = item.indexOf("=");
    if (at <= 0) continue;
    let value = item.slice(at + 1).trim();
    if (/^".*"$/s.test(value)) value = value.slice(1, -1).replace(/\\(.)/gs, "$1");
    params[item.slice(0, at).trim().toLowerCase()] = value;
  }
  return { kind: head.trim().toLowerCase(), params };
}

// A decoder for a charset label. The WHATWG labels that TextDecoder knows spell "utf_8" and
// "us_ascii" (which message_create_text accepts, as the Python client reads them) with a hyphen,
// and TextDecoder reads ISO-8859-1 / latin-1 and US-ASCII as windows-1252: bytes 0x80-0x9F
// became "€", "‚"... where Python reads U+0080-U+009F, and bytes above 0x7F in "ASCII" text were
// taken instead of refused. Those two are decoded here as Python decodes them.
const LATIN1 = new Set(["iso-8859-1", "iso8859-1", "latin-1", "latin1", "latin", "l1", "cp819", "8859"]);
const ASCII = new Set(["us-ascii", "ascii", "646", "ansi-x3.4-1968", "iso646-us", "cp367", "csascii", "us"]);

function decoderFor(charset) {
  const label = charset.trim().toLowerCase().replaceAll("_", "-");
  if (LATIN1.has(label)) return { decode: (bytes) => Buffer.from(bytes).toString("latin1") };
  if (ASCII.has(label)) {
    return {
      decode(bytes) {
        const at = bytes.findIndex((b) => b > 0x7f);
        if (at >= 0) throw new TypeError(`byte 0x${bytes[at].toString(16)} at ${at} is not ASCII`);
        return Buffer.from(bytes).toString("latin1");
      },
    };
  }
  const options = { fatal: true, ignoreBOM: true };
  try {
    return new TextDecoder(charset, options);
  } catch (err) {
    if (!charset.includes("_")) throw err;
    return new TextDecoder(charset.replaceAll("_", "-"), options);
  }
}

// Decode content as the Python client does: JSON (application/json or any +json type) and
// text (text/*) in their charset (UTF-8 if none is named), anything else as raw bytes (base64
// here, to print). Throws for content that is not what its type says: malformed JSON, bytes
// that are not in the charset (fatal: not silently turned into U+FFFD) or a charset
// TextDecoder does not know.
export function decode(content, contentType) {
  const { kind, params } = mediaType(contentType);
  const json = kind === "application/json" || kind.endsWith("+json");
  if (!json && !kind.startsWith("text/")) return { base64: content.toString("base64") };
  const text = decoderFor(params.charset || "utf-8").decode(content);
  // a byte-order mark before JSON is not part of the value (RFC 8259); in text it is kept
  return json ? JSON.parse(text.replace(/^\uFEFF/, "")) : text;
}
