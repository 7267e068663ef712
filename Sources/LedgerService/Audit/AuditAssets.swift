import Crypto
import Foundation

/// The pages' only stylesheet and script, served by the binary itself (`/audit/static/…`): no CDN,
/// no web font, nothing inline — the Content-Security-Policy allows scripts and styles from this
/// origin only.
enum AuditAssets {
    /// Sent on every `/audit` answer.
    static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; "
        + "frame-ancestors 'none'; base-uri 'none'"

    static let securityHeaders: [(String, String)] = [
        ("Content-Security-Policy", contentSecurityPolicy),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("X-Frame-Options", "DENY"),
        ("Cache-Control", "no-store"),
    ]

    static let css = """
    :root { --ink: #1d232b; --muted: #5b6673; --line: #d7dde4; --bg: #f6f7f9; --card: #fff; --accent: #0b5cad;
            --ok: #1b7a3a; --bad: #b42318; --warn: #8a5a00; }
    * { box-sizing: border-box; }
    body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", sans-serif;
           color: var(--ink); background: var(--bg); }
    header { background: #14202e; color: #fff; padding: .6rem 1rem; display: flex; flex-wrap: wrap; gap: .5rem 1.2rem;
             align-items: center; }
    header a { color: #fff; text-decoration: none; }
    header .brand { font-weight: 600; margin-right: auto; }
    header nav { display: flex; flex-wrap: wrap; gap: .3rem 1rem; }
    header nav a[aria-current] { text-decoration: underline; }
    header form { margin: 0; }
    header button { background: transparent; color: #fff; border: 1px solid #8ea3b8; border-radius: 4px; padding: .2rem .6rem; cursor: pointer; }
    main { max-width: 1200px; margin: 0 auto; padding: 1rem; }
    h1 { font-size: 1.35rem; margin: .4rem 0 1rem; word-break: break-all; }
    h2 { font-size: 1.1rem; margin: 1.6rem 0 .6rem; }
    .card { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 1rem; margin-bottom: 1rem; }
    .muted { color: var(--muted); }
    .cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(11rem, 1fr)); gap: 0 1rem; }
    .cards .figure { display: block; font-size: 1.6rem; font-weight: 600; }
    .ok { color: var(--ok); font-weight: 600; }
    .bad { color: var(--bad); font-weight: 600; }
    .warn { color: var(--warn); font-weight: 600; }
    .notice { border-left: 4px solid var(--accent); background: #eef5fc; padding: .6rem .8rem; margin: 0 0 1rem; }
    .error { border-left-color: var(--bad); background: #fdf0ef; }
    table { border-collapse: collapse; width: 100%; background: var(--card); }
    th, td { text-align: left; vertical-align: top; padding: .4rem .5rem; border-bottom: 1px solid var(--line); }
    th { font-size: .85rem; color: var(--muted); font-weight: 600; }
    td { word-break: break-word; }
    .scroll { overflow-x: auto; }
    code, pre, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: .85rem; }
    pre { white-space: pre-wrap; word-break: break-all; background: #f0f2f5; padding: .6rem; border-radius: 4px; max-height: 24rem; overflow: auto; }
    dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; margin: 0; }
    dl.facts dt { color: var(--muted); }
    dl.facts dd { margin: 0; word-break: break-word; }
    form.filters { display: flex; flex-wrap: wrap; gap: .6rem; align-items: end; }
    form.filters label { display: flex; flex-direction: column; font-size: .85rem; color: var(--muted); }
    input, select { font: inherit; padding: .3rem .4rem; border: 1px solid #aab4bf; border-radius: 4px; min-width: 10rem; }
    button.primary, a.button { background: var(--accent); color: #fff; border: 0; border-radius: 4px; padding: .4rem .9rem;
                               font: inherit; cursor: pointer; text-decoration: none; display: inline-block; }
    .login { max-width: 28rem; margin: 3rem auto; }
    .login input { width: 100%; margin: .3rem 0 1rem; }
    .pager { display: flex; gap: 1rem; margin-top: .8rem; align-items: center; flex-wrap: wrap; }
    .event { border: 1px solid var(--line); border-radius: 6px; background: var(--card); margin-bottom: .8rem; }
    .event > .head { display: flex; flex-wrap: wrap; gap: .3rem 1rem; padding: .5rem .8rem; border-bottom: 1px solid var(--line); }
    .event > .body { padding: .5rem .8rem; }
    .change { display: inline-block; margin-right: 1rem; }
    tr.changed td { background: #fff8e6; }
    details summary { cursor: pointer; color: var(--accent); }
    @media (max-width: 640px) {
      body { font-size: 14px; }
      main { padding: .6rem; }
      th, td { padding: .3rem; }
      table.responsive thead { display: none; }
      table.responsive tr { display: block; border-bottom: 2px solid var(--line); padding: .3rem 0; }
      table.responsive td { display: block; border: 0; padding: .15rem .3rem; }
      table.responsive td::before { content: attr(data-label) ": "; color: var(--muted); font-size: .8rem; }
      input, select { min-width: 0; width: 100%; }
      form.filters label { width: 100%; }
    }
    """

    /// Shows each `<time data-ms>` in the reader's own time zone on hover. Nothing else.
    static let js = """
    "use strict";
    document.addEventListener("DOMContentLoaded", function () {
      document.querySelectorAll("time[data-ms]").forEach(function (t) {
        var ms = Number(t.getAttribute("data-ms"));
        if (isFinite(ms)) { t.title = new Date(ms).toString(); }
      });
    });
    """

    /// The tab icon (browsers ask for one; a 404 would be a console error on every page).
    static let favicon = ##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#14202e"/><path d="M4 4h8M4 8h8M4 12h5" stroke="#fff" stroke-width="1.6"/></svg>"##

    static let cssETag = "\"" + Hex.encode(Digest.sha256(Array(css.utf8)).prefix(8)) + "\""
    static let jsETag = "\"" + Hex.encode(Digest.sha256(Array(js.utf8)).prefix(8)) + "\""
}
