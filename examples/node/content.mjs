// Reading a message's content by its content type, as the Python client reads it; shared by
// pg_example.mjs and postgresjs_example.mjs.

// A content type's lower-case media type and its parameters: "text/plain; charset=ISO-8859-1"
// gives { kind: "text/plain", params: { charset: "ISO-8859-1" } }. Media types are
// case-insensitive (RFC 9110), so "Application/JSON" is JSON too; a semicolon inside a quoted
// value does not start a parameter (name="a;charset=x" names no charset), as in the Python client.
// Parts are trimmed of ASCII white space only, as message_create_text and the Python client trim
// them: String.prototype.trim() also takes Unicode's (a no-break space before "charset"), and such
// a content type, which names no charset to the server and to Python, was read in its charset.
const blanks = (s) => s.replace(/^[ \t\r\n\f\v]+|[ \t\r\n\f\v]+$/g, "");

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
    let value = blanks(item.slice(at + 1));
    // a quoted string loses its quotes and escapes; an unbalanced quote at either end is dropped
    if (value.length >= 2 && /^".*"$/s.test(value)) value = value.slice(1, -1).replace(/\\(.)/gs, "$1");
    else value = value.replace(/^"+|"+$/g, "");
    params[blanks(item.slice(0, at)).toLowerCase()] = value;
  }
  return { kind: blanks(head).toLowerCase(), params };
}

// A decoder for a charset label. The WHATWG labels that TextDecoder knows spell "utf_8" and
// "us_ascii" (which message_create_text accepts, as the Python client reads them) with a hyphen,
// and TextDecoder reads ISO-8859-1 / latin-1 and US-ASCII as windows-1252: bytes 0x80-0x9F
// became "€", "‚"... where Python reads U+0080-U+009F, and bytes above 0x7F in "ASCII" text were
// taken instead of refused. Those two are decoded here as Python decodes them.
// windows-1252 too: TextDecoder's mapping of it depends on how Node was built (Node 20 here read
// byte 0x80 as U+0080, where Python reads "€", and took the five bytes cp1252 leaves undefined);
// it is decoded here from its table, the undefined bytes refused. And "utf-16" is read as Python
// reads it: a byte-order mark says the byte order and is dropped, none means little-endian
// (TextDecoder's "utf-16" is little-endian whatever the mark says).
// The sets below hold names as Python compares them (lower case, each run of characters other
// than letters, digits and "." one "_", none at either end), with Python's aliases.
const pythonName = (charset) => charset.toLowerCase().replace(/[^a-z0-9.]+/g, "_").replace(/^_+|_+$/g, "");
const LATIN1 = new Set(["latin_1", "iso8859_1", "iso_8859_1", "8859", "cp819", "csisolatin1", "ibm819", "iso8859",
  "iso_8859_1_1987", "iso_ir_100", "l1", "latin", "latin1"]);
const ASCII = new Set(["ascii", "646", "ansi_x3.4_1968", "ansi_x3.4_1986", "ansi_x3_4_1968", "cp367", "csascii",
  "ibm367", "iso646_us", "iso_646.irv_1991", "iso_ir_6", "us", "us_ascii"]);
const CP1252 = new Set(["cp1252", "windows_1252", "1252"]);
const CP1252_HIGH = "\u20ac\0\u201a\u0192\u201e\u2026\u2020\u2021\u02c6\u2030\u0160\u2039\u0152\0\u017d\0"
  + "\0\u2018\u2019\u201c\u201d\u2022\u2013\u2014\u02dc\u2122\u0161\u203a\u0153\0\u017e\u0178";
const UTF16 = new Set(["utf_16", "utf16", "u16"]);
// Names TextDecoder reads as another charset (WHATWG's: ISO-8859-9 as windows-1254, TIS-620 and
// ISO-8859-11 as windows-874, whose bytes 0x80-0x9F are letters where Python's are controls):
// refused rather than read otherwise.
const NOT_AS_NAMED = new Set(["latin_5", "iso8859_9", "iso_8859_9", "csisolatin5", "iso_8859_9_1989", "iso_ir_148",
  "l5", "latin5", "iso8859_11", "iso_8859_11", "iso_8859_11_2001", "thai", "tis_620", "tis620", "iso_ir_166",
  "tis_620_0", "tis_620_2529_0", "tis_620_2529_1"]);

function decoderFor(charset) {
  const label = pythonName(charset);
  if (NOT_AS_NAMED.has(label)) throw new RangeError(`charset ${charset} is read by TextDecoder as another charset`);
  if (LATIN1.has(label)) return { decode: (bytes) => Buffer.from(bytes).toString("latin1") };
  if (CP1252.has(label)) {
    return {
      decode(bytes) {
        let out = "";
        for (const [at, b] of bytes.entries()) {
          const char = b >= 0x80 && b <= 0x9f ? CP1252_HIGH[b - 0x80] : String.fromCharCode(b);
          if (char === "\0" && b !== 0) throw new TypeError(`byte 0x${b.toString(16)} at ${at} is not in cp1252`);
          out += char;
        }
        return out;
      },
    };
  }
  if (UTF16.has(label)) {
    return {
      decode(bytes) {
        const big = bytes.length >= 2 && bytes[0] === 0xfe && bytes[1] === 0xff;
        const little = bytes.length >= 2 && bytes[0] === 0xff && bytes[1] === 0xfe;
        const rest = big || little ? bytes.subarray(2) : bytes;
        return new TextDecoder(big ? "utf-16be" : "utf-16le", { fatal: true, ignoreBOM: true }).decode(rest);
      },
    };
  }
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
  // (an empty charset names none: refused, as Python refuses it, not read as UTF-8)
  const text = decoderFor(params.charset ?? "utf-8").decode(content);
  // a byte-order mark before JSON is not part of the value (RFC 8259); in text it is kept
  return json ? JSON.parse(text.replace(/^\uFEFF/, "")) : text;
}
