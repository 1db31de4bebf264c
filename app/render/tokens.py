"""HTML of the generated tokens, each tinted by its probability, with its top-5 on hover or click.

Each token is one small chip whose ``data-*`` attributes carry its probability and the top-5
candidates; one shared tooltip (:data:`TOOLTIP_JS`, run once by the ``gr.HTML`` component) reads
them on hover or focus. Keeping the tooltips out of the chips keeps the streamed HTML small and
cheap for the browser. The same script draws the chips: the streamed value only grows (new chips
at its end), so it appends the new ones and leaves the drawn ones, and the chip under the pointer,
untouched. It appends them to short runs of chips stacked in the box (``div.tok-run``), so the
browser lays out the newest run's lines per append, not every line of a long answer. The CSS
lives in ``assets/style.css`` (``tok``, ``tok-tip``...).
"""

from __future__ import annotations

import html
import json

from app.render.structured import chip_extras
from app.render.live_js import REGISTRY_JS

PIECE = "\ufffd"  # what a lone byte of a multi-byte UTF-8 character decodes to

LEGEND = (
    '<div class="tok-legend">One chip per token, tinted by its probability: '
    '<span class="tok-swatch" style="background:{hi}">likely</span> '
    '<span class="tok-swatch" style="background:{mid}">so-so</span> '
    '<span class="tok-swatch" style="background:{lo}">surprising</span>; hover or click one for '
    'the top-5 candidates. <span class="tok-swatch tok-draft" title="a drafted token the model '
    'accepted (speculative decoding)">dashed</span>: an accepted draft; '
    '<span class="tok-swatch tok-forced" title="the only token the structured output\'s grammar '
    'allowed">underlined</span>: forced by a grammar.</div>'
)

# Draws the chips (appending what the value gained since the last update) and shows the hovered
# or focused chip's tooltip: built from its data attributes into one fixed-position box that
# follows its chip when anything scrolls, and stays while the answer streams.
TOOLTIP_JS = REGISTRY_JS + r"""
const body = element.querySelector('.tok-body');
const tip = document.createElement('div');
tip.className = 'tok-tip';
document.body.appendChild(tip);
let current = null, drawn = null;
const ENT = {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'};
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ENT[c]);
const shown = (s) => esc(JSON.stringify(s).slice(1, -1));
const PIECE_NOTE = '� = one byte of a character that needs several tokens';
const row = (text, p, chosen) =>
  `<tr class="${chosen ? 'tip-chosen' : ''}"><td class="tip-text">${shown(text)}</td>` +
  `<td class="tip-bar"><span style="width:${Math.max(1, Math.round(p * 100))}px"></span></td>` +
  `<td class="tip-prob">${(p * 100).toFixed(1)}%</td></tr>`;
function show(chip) {
  current = chip;
  const d = chip.dataset, p = parseFloat(d.p);
  const text = JSON.parse(d.tt || '""'), top = JSON.parse(d.top || '[]');
  let rows = '', marked = false;
  for (const [t, q] of top) {
    const chosen = !marked && t === text && Math.abs(q - p) < 1e-6;
    marked = marked || chosen;
    rows += row(t, q, chosen);
  }
  if (top.length && !marked) {
    rows += '<tr><td colspan="3" class="tip-gap">… chosen, outside the top 5:</td></tr>' + row(text, p, true);
  }
  let note = '';
  if (d.piece) {
    note = PIECE_NOTE + '; ' + (d.done ? 'this token completes it' : 'the character shows on a later chip');
  } else if (top.some(([t]) => t.includes('\ufffd'))) {
    note = PIECE_NOTE;
  }
  note = note ? `<div class="tip-note">${note}</div>` : '';
  if (d.mask) {  // structured output: what the grammar's mask allowed and removed
    const removed = JSON.parse(d.removed || '[]');
    note += `<div class="tip-note">${esc(d.mask)}</div>`;
    if (removed.length) {
      note += '<div class="tip-note">most likely tokens the mask removed (before it):</div><table>' +
        removed.map(([t, q]) => row(t, q, false)).join('') + '</table>';
    }
  }
  tip.innerHTML = `<b>token #${d.i}</b> (${esc(d.ph)}) · p = ${(p * 100).toFixed(1)}%${note}<table>${rows}</table>`;
  tip.style.display = 'block';
  place();
}
function place() {
  const r = current.getBoundingClientRect(), w = tip.offsetWidth, h = tip.offsetHeight;
  tip.style.left = Math.max(4, Math.min(r.left, window.innerWidth - w - 8)) + 'px';
  tip.style.top = (r.bottom + h + 6 < window.innerHeight ? r.bottom + 4 : Math.max(4, r.top - h - 4)) + 'px';
}
const hide = () => { current = null; tip.style.display = 'none'; };
const chipOf = (e) => e.target.closest && e.target.closest('.tok');
element.addEventListener('mouseover', (e) => { const c = chipOf(e); if (c) show(c); });
element.addEventListener('mouseout', (e) => {
  if (chipOf(e) && !(e.relatedTarget && e.relatedTarget.closest && e.relatedTarget.closest('.tok'))) hide();
});
element.addEventListener('focusin', (e) => { const c = chipOf(e); if (c) show(c); });
element.addEventListener('focusout', hide);
// the answer's text box scrolls as it streams: the tooltip moves with its chip instead of closing
window.addEventListener('scroll', () => {
  if (!current) return;
  if (!current.isConnected) { hide(); return; }
  const r = current.getBoundingClientRect(), box = body.getBoundingClientRect();
  const out = (a) => a.bottom < 0 || a.top > window.innerHeight;
  if (out(r) || r.bottom < box.top || r.top > box.bottom) hide(); else place();
}, true);
// follow the newest chip, unless the reader has scrolled back to earlier ones or points at one
const follow = live.follower(body, () => body.matches(':hover'));
const chips = (html) => { const t = document.createElement('template'); t.innerHTML = html; return t.content; };
// The chips sit in runs (div.tok-run) stacked in the body; new chips go into the last, open run.
// The browser lays out a run's lines as one piece, so an append costs the open run, not every
// line of the answer so far. Once the open run holds SEAL chips, the chips of its last line move
// to a new open run and its full lines stay: nothing moves on screen, as the new run starts where
// that line started (lines break between chips; a chip is never laid out again for it).
const SEAL = 64;
let open = null, sealAt = SEAL;
const run = () => { const r = document.createElement('div'); r.className = 'tok-run'; return r; };
const middle = (r) => r.top + r.height / 2;
function seal() {
  const kids = open.children, n = kids.length;
  const last = (el) => { const r = el.getClientRects(); return r.length ? middle(r[r.length - 1]) : null; };
  const half = (parseFloat(getComputedStyle(open).lineHeight) || 20) / 2, end = last(kids[n - 1]);
  if (end === null) return false;
  let i = n - 1, m = null;
  while (i > 0 && (m = last(kids[i - 1])) !== null && m >= end - half) i--;   // to the last line's first chip
  // a chip torn across two lines (a long token broken inside) stays: try again a little later
  if (i === 0 || m === null || middle(kids[i].getClientRects()[0]) < end - half) return false;
  const next = run();
  while (kids.length > i) next.appendChild(kids[i]);
  body.appendChild(next);
  open = next;
  return true;
}
function add(content) {
  if (!open || open.parentNode !== body) { open = run(); body.appendChild(open); }
  // the layout read here is the last frame's (clean unless this frame's ops changed the page)
  if (open.childElementCount >= sealAt) sealAt = seal() ? SEAL : open.childElementCount + SEAL / 4;
  open.appendChild(content);
}
function draw(value) {
  value = value || '';
  if (value === drawn) return;
  follow(() => {
    if (drawn && value.startsWith(drawn)) {  // the chips drawn so far stay as they are
      add(chips(value.slice(drawn.length)));
    } else {
      open = run(); sealAt = SEAL;
      open.appendChild(chips(value));
      body.replaceChildren(open);
      follow.restart();   // a new answer is followed from its start
      if (current && !current.isConnected) hide();
    }
  });
  drawn = value;
}
watch('value', () => draw(props.value));
draw(props.value);
// the live channel (app.tabs.playground.live_channel): new chips appended, or all of them anew
if ('__NAME__') live.register('__NAME__', (op) => {
  if (op.app !== undefined) follow(() => add(chips(op.app)));
  else if (op.set !== undefined) { drawn = null; draw(op.set); }
});
"""


def tooltip_js(live_name: str = "") -> str:
    """:data:`TOOLTIP_JS` for one component; ``live_name``: the name the live channel's ops for
    these chips carry (``{"app": chips}`` or ``{"set": chips}``), empty for chips drawn from
    the component's value only."""
    return TOOLTIP_JS.replace("__NAME__", live_name)


def prob_color(prob: float) -> str:
    """Background colour for a probability: red (0) through yellow to green (1), light enough
    for dark text.

    Returns:
        A CSS ``hsl(...)`` string.
    """
    p = min(1.0, max(0.0, float(prob)))
    return f"hsl({round(120 * p)}, 75%, 82%)"


def legend_html() -> str:
    """The colour legend shown above the tokens."""
    return LEGEND.format(hi=prob_color(1.0), mid=prob_color(0.5), lo=prob_color(0.05))


def chip_text(tok) -> str:
    """The text a chip shows: the token's own text, or for a byte piece of a multi-byte
    character (Chinese, emoji) the character it completed, or ``·`` while it is incomplete."""
    if PIECE in tok.text:
        return getattr(tok, "delta", "") or "·"
    return tok.text


def _shown(text: str) -> str:
    """Token text made visible: newlines as ↵ (plus a real line break), tabs as →."""
    esc = html.escape(text)
    esc = esc.replace("\t", "→")
    return esc.replace("\n", "↵<br>") if esc else "∅"


def tooltip_data(tok, index: int) -> dict:
    """The ``data-*`` attributes the tooltip reads (values are strings).

    Keys: ``i`` (token number), ``ph`` (phase), ``p`` (probability), ``tt`` (the token's text as
    JSON), ``top`` (up to 5 ``[text, prob]`` pairs as JSON), and ``piece``/``done`` for a byte
    piece of a multi-byte character (``done`` when this token completes the character).
    """
    data = {"i": str(index), "ph": tok.phase, "p": f"{tok.prob:.6f}",
            "tt": json.dumps(tok.text, ensure_ascii=False),
            "top": json.dumps([[t, round(p, 6)] for t, p in tok.top[:5]], ensure_ascii=False)}
    if PIECE in tok.text:
        data["piece"] = "1"
        if getattr(tok, "delta", ""):
            data["done"] = "1"
    if getattr(tok, "draft", False):
        data["ph"] = "draft accepted"
    return data


def token_html(tok, index: int) -> str:
    """One token chip: its text tinted by probability, its tooltip data in attributes.

    Args:
        tok: a ``TokenView``.
        index: the output token number (1-based), shown in the tooltip.
    """
    attrs = " ".join(f'data-{k}="{html.escape(v, quote=True)}"' for k, v in tooltip_data(tok, index).items())
    cls = "tok" if tok.visible else "tok tok-special"
    if PIECE in tok.text:
        cls += " tok-piece"
    if getattr(tok, "draft", False):  # an accepted draft token (speculative decoding)
        cls += " tok-draft"
    extra_cls, extra = chip_extras(tok)  # structured output: the grammar's mask
    if extra:
        cls += extra_cls
        attrs += " " + " ".join(f'data-{k}="{html.escape(v, quote=True)}"' for k, v in extra.items())
    return (f'<span class="{cls}" tabindex="0" style="background:{prob_color(tok.prob)}" {attrs}>'
            f"{_shown(chip_text(tok))}</span>")


def tokens_html(tokens: list) -> str:
    """All tokens as chips, in order (the body of the token inspector)."""
    if not tokens:
        return "<span class='tok-empty'>The answer's tokens appear here as they are generated.</span>"
    return "".join(token_html(t, i + 1) for i, t in enumerate(tokens))


class TokenChips:
    """The token inspector's body for one streaming answer, grown chip by chip: each token is
    drawn once, however often the page redraws (:func:`tokens_html` redraws them all)."""

    def __init__(self) -> None:
        self._chips: list[str] = []

    def html(self, tokens: list) -> str:
        """All tokens as chips, in order (the same HTML as :func:`tokens_html`)."""
        for i in range(len(self._chips), len(tokens)):
            self._chips.append(token_html(tokens[i], i + 1))
        return "".join(self._chips) if tokens else tokens_html([])


def inspector_html(tokens: list) -> str:
    """The whole token inspector: legend plus chips, wrapped in one container."""
    return inspector_template().replace("<div class='tok-body'>", "<div class='tok-body'>" + tokens_html(tokens))


def inspector_template() -> str:
    """The inspector's frame for a ``gr.HTML`` template: the legend and an empty body that
    :data:`TOOLTIP_JS` fills with the value (:func:`tokens_html`).

    Keeping the legend out of the value makes the streamed value append-only (new chips are added
    at its end), so Gradio sends only the new chips with each update and the script appends only
    them; the template has no ``${value}`` slot, so Gradio never re-renders the drawn chips.
    """
    return f"<div class='tok-view'>{legend_html()}<div class='tok-body'></div></div>"
