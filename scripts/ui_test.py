"""The auditor's pages in Chromium (scripts/ui-test.sh starts the service and sets the variables).

Each step asserts what a person would check; screenshots go to LEDGER_UI_SHOTS. Any console
error or Content-Security-Policy violation the browser reports fails the run.
"""
import base64
import hashlib
import json
import os
import re
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # `http` is this script's client below

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

BASE = os.environ["LEDGER_UI_BASE"]
SHOTS = os.environ["LEDGER_UI_SHOTS"]
WECHAT_TOKEN = os.environ["LEDGER_UI_WECHAT_TOKEN"]
APP = os.environ["LEDGER_UI_APP_TOKEN"]
AUDITOR = os.environ["LEDGER_UI_AUDITOR_TOKEN"]
ADMIN = os.environ["LEDGER_UI_ADMIN_TOKEN"]
HOSTILE = "<img src=x onerror=alert(1)>"
OTID = "2000001147420001"


def fail(message):
    print(f"ui-test: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def http(path, token=None, data=None, content_type=None):
    request = urllib.request.Request(BASE + path, data=data, method="POST" if data is not None else "GET")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if content_type:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def push(message, nonce):
    """A plaintext-mode JSON push, signed like WeChat signs it (SHA-1 of the sorted token, time, nonce).

    The query's timestamp is now: plaintext pushes outside the replay window are refused."""
    ts = str(int(time.time()))
    signature = hashlib.sha1("".join(sorted([WECHAT_TOKEN, ts, nonce])).encode()).hexdigest()
    query = urllib.parse.urlencode({"signature": signature, "timestamp": ts, "nonce": nonce})
    status, _, body = http(f"/v1/wechat/notifications?{query}", data=json.dumps(message).encode(),
                           content_type="application/json")
    check(status == 200, f"push {message.get('Event')}: {status} {body[:300]!r}")


def header(event, at):
    return {"ToUserName": "gh_ui", "FromUserName": "o_official", "CreateTime": at, "MsgType": "event", "Event": event}


def inquiry(order, at, reason="UNINTENDED_PURCHASE"):
    message = header("xpay_subscribe_ios_refund_query_notify", at)
    message.update({"refund_time": str(at), "order_time": "1775226066", "channel_bill": "510001234567890",
                    "bundleid": "com.tencent.xin", "product_id": "vip_monthly", "p_count": "1",
                    "refund_request_reason": reason, "provide_status": "1", "pay_order_id": order,
                    "service_type": "unipdt", "consumption_status": "0"})
    return message


def report_csv(name, link):
    """The reports API's CSV for the query a page's CSV link carries (the same parameters)."""
    query = urllib.parse.urlsplit(link).query
    status, _, body = http(f"/v1/reports/{name}?{query}&format=csv", token=AUDITOR)
    check(status == 200, f"/v1/reports/{name} CSV answered {status}: {body[:200]!r}")
    return [line.split(",") for line in body.decode().split("\r\n") if line and not line.startswith("#")]


def check_chart(b, section, name):
    """One chart: its points are the CSV's rows (per series, one currency), its table is the CSV."""
    link = section.find_element(By.CSS_SELECTOR, "a[href*='.csv']").get_attribute("href")
    csv = report_csv(name, link)
    table = b.driver.execute_script(
        "return Array.from(arguments[0].querySelectorAll('table tr')).map(r => Array.from(r.children).map(c => c.textContent.trim()))",
        section)
    check(table == csv, f"{name}: the table differs from the API's CSV: {table[:3]} vs {csv[:3]}")
    check(len(csv) > 1, f"{name}: the report has no rows")
    points = b.driver.execute_script(
        "return Array.from(arguments[0].querySelectorAll('svg.chart circle.point')).map(c => [c.dataset.series, c.dataset.value])",
        section)
    header, rows = csv[0], csv[1:]
    series = sorted({s for s, _ in points})
    check(series, f"{name}: the chart has no points")
    for label in series:
        check(label in header, f"{name}: chart series {label} is not a CSV column {header}")
        values = [v for s, v in points if s == label]
        column = header.index(label)
        groups = {}
        for r in rows:
            groups.setdefault(r[1] if "currency" in header else "", []).append(r[column])
        check(any(values == g for g in groups.values()),
              f"{name}: series {label} has {len(values)} points {values[:4]}, the CSV's {[len(g) for g in groups.values()]} rows")
    return len(points)


def reports_caught_up():
    """Waits until the reports projection (kept after each commit by the worker) is at the head."""
    deadline = time.time() + 60
    while time.time() < deadline:
        status, _, body = http("/readyz", token=ADMIN)
        projections = {p["name"]: p for p in json.loads(body).get("projections", [])} if status == 200 else {}
        reports = projections.get("reports")
        if reports and reports["lag"] == 0 and reports["status"] == "running":
            return reports["position"]
        time.sleep(0.2)
    fail(f"the reports projection did not catch up within 60 s: {body[:400]!r}")


class Receiver(BaseHTTPRequestHandler):
    """Two webhook receivers on one loopback port: /good accepts, /bad answers 500 with a hostile
    body (the auditor's page must show it as text)."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/good":
            self.send_response(204)
            self.end_headers()
        else:
            body = b'<script>alert("receiver")</script>'
            self.send_response(500)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, *args):
        pass


def seed_webhooks():
    """Endpoints for both receivers, created before the WeChat pushes so their events go to both,
    and a `test` event to each."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    for name in ["good", "bad"]:
        secret = "whsec_" + base64.b64encode(hashlib.sha256(name.encode()).digest()).decode()
        body = json.dumps({"name": name, "url": f"http://127.0.0.1:{port}/{name}", "secret": secret}).encode()
        status, _, answer = http("/v1/admin/webhooks/endpoints", token=ADMIN, data=body, content_type="application/json")
        check(status == 201, f"webhook endpoint {name}: {status} {answer[:300]!r}")
        status, _, answer = http("/v1/admin/webhooks/test", token=ADMIN, data=json.dumps({"endpoint": name}).encode(),
                                 content_type="application/json")
        check(status == 202, f"webhook test event for {name}: {status} {answer[:300]!r}")
    return server


def webhooks_attempted():
    """Waits until the API shows a delivered attempt to `good` and a failed one to `bad`; the events."""
    deadline = time.time() + 60
    while time.time() < deadline:
        events, cursor = [], None
        while True:  # every page: the simulation's events come first, the endpoints' after them
            status, _, body = http("/v1/admin/webhooks/events?limit=500" + (f"&cursor={cursor}" if cursor else ""), token=ADMIN)
            check(status == 200, f"GET /v1/admin/webhooks/events: {status} {body[:300]!r}")
            page = json.loads(body)
            events += page["events"]
            cursor = page["next"]
            if not cursor:
                break
        history = {d["endpoint"]: [a["outcome"] for a in d["history"]] for e in events for d in e["deliveries"] if d["history"]}
        if "delivered" in history.get("good", []) and "failed" in history.get("bad", []):
            return events
        time.sleep(0.5)
    fail(f"no delivered and failed webhook attempts within 60 s: {body[:400]!r}")


def seed_wechat():
    delivery = header("xpay_goods_deliver_notify", 1775226066)
    delivery.update({"OpenId": "oUIcustomer", "OutTradeNo": "ORDER-UI-1", "Env": 0,
                     "GoodsInfo": {"ProductId": "vip_monthly", "Quantity": 1, "OrigPrice": 3000, "ActualPrice": 990, "Attach": "ui"},
                     "AppleSubscriptionInfo": {"OriginalTransactionId": OTID, "AutoRenewStatus": 1, "RenewalDate": 1777818065000}})
    push(delivery, "n1")
    push(inquiry("ORDER-UI-1", 1775300000), "n2")
    refund = header("xpay_refund_notify", 1775400000)
    refund.update({"OpenId": "oUIcustomer", "WxRefundId": "wxr-ui-1", "MchRefundId": "", "WxOrderId": "WX-UI-1",
                   "MchOrderId": "ORDER-UI-1", "RefundFee": 990, "RetCode": 0, "RetMsg": "", "RefundStartTimestamp": 1775399940,
                   "RefundSuccTimestamp": 1775400000, "RetryTimes": 0})
    push(refund, "n3")
    push(inquiry(HOSTILE, 1775300600, reason='"><script>alert(1)</script>'), "n4")


class Browser:
    def __init__(self):
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1280,900", "--hide-scrollbars", "--force-device-scale-factor=1"]:
            options.add_argument(argument)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)
        self.driver.set_page_load_timeout(30)
        self.downloads = os.path.join(SHOTS, "downloads")
        os.makedirs(self.downloads, exist_ok=True)
        for old in os.listdir(self.downloads):
            os.remove(os.path.join(self.downloads, old))
        self.driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": self.downloads})

    def open(self, path, expected_status=None):
        self.driver.get(BASE + path)
        self.console_clean(path, expected_status)

    def console_clean(self, where, expected_status=None):
        for entry in self.driver.get_log("browser"):
            text = entry.get("message", "")
            # A refusal page is answered with its status on purpose; Chromium logs the status.
            if expected_status and entry.get("source") == "network" and f"status of {expected_status}" in text:
                continue
            if entry.get("level") in ("SEVERE", "ERROR") or "Content Security Policy" in text or "Refused to" in text:
                fail(f"console at {where}: {entry}")

    def click(self, element, where):
        """Clicks and waits for the next page (a click does not wait for the navigation it starts)."""
        page = self.driver.find_element(By.TAG_NAME, "html")
        element.click()
        WebDriverWait(self.driver, 20).until(expected_conditions.staleness_of(page))
        WebDriverWait(self.driver, 20).until(lambda d: d.execute_script("return document.readyState") == "complete")
        self.console_clean(where)

    def text(self):
        return self.driver.find_element(By.TAG_NAME, "body").text

    def shot(self, name, width=1280):
        self.driver.set_window_size(width, 900)
        height = self.driver.execute_script("return Math.min(document.documentElement.scrollHeight, 4000)")
        self.driver.set_window_size(width, max(height, 600))
        overflow = self.driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
        check(overflow <= 1, f"{name} at {width} px: the page is {overflow} px wider than the window")
        self.driver.save_screenshot(os.path.join(SHOTS, f"{name}-{width}.png"))
        self.driver.set_window_size(1280, 900)

    def shot_overview(self):
        """The README's charts overview: the top of the page (navigation, headline cards, the first
        charts) in a 1280 × 1180 window, without the provenance line — its chain hash covers the
        events' recording times, so it differs on every run while the figures do not. The file is
        then the same on every run until the page changes."""
        self.driver.set_window_size(1280, 1180)
        self.driver.execute_script("window.scrollTo(0, 0); document.getElementById('report-position').style.display = 'none'")
        self.driver.save_screenshot(os.path.join(SHOTS, "charts-overview-1280.png"))
        self.driver.execute_script("document.getElementById('report-position').style.display = ''")
        self.driver.set_window_size(1280, 900)

    def sign_in(self, token, expected_status=None):
        self.open("/audit/login")
        field = self.driver.find_element(By.ID, "token")
        field.clear()
        field.send_keys(token)
        page = self.driver.find_element(By.TAG_NAME, "html")
        self.driver.find_element(By.ID, "sign-in").click()
        WebDriverWait(self.driver, 20).until(expected_conditions.staleness_of(page))
        self.console_clean("sign-in", expected_status)


def main():
    started = time.time()
    receiver = seed_webhooks()
    seed_wechat()

    # The header every page carries, and the API's view to compare the pages with.
    status, headers, _ = http("/audit/login")
    check(status == 200, f"/audit/login answered {status}")
    csp = headers.get("Content-Security-Policy", "")
    check("default-src 'none'" in csp and "script-src 'self'" in csp and "'unsafe-inline'" not in csp, f"CSP header: {csp!r}")
    status, _, body = http("/v1/refunds?source=apple&limit=50", token=AUDITOR)
    check(status == 200, f"refund list: {status}")
    apple_cases = json.loads(body)["cases"]
    check(apple_cases, "the simulation produced no Apple refund case")
    apple_otid = apple_cases[0]["originalTransactionId"]

    b = Browser()
    try:
        # An app token gets a refusal page, not a session.
        b.sign_in(APP, expected_status=403)
        check("app role" in b.text(), f"app token: {b.text()[:300]}")
        b.shot("refusal-app-token", 390)
        b.open("/audit/refunds", expected_status=403)  # the refusal's log entry may arrive late
        check("/audit/login" in b.driver.current_url, "no session after the refusal")

        b.sign_in(AUDITOR)
        check(b.driver.current_url.endswith("/audit/search"), f"after sign-in: {b.driver.current_url}: {b.text()[:400]}")
        check(b.driver.execute_script("return document.cookie") == "", "the session cookie is HttpOnly")

        # Search for a subscription, open its timeline.
        box = b.driver.find_element(By.ID, "q")
        box.send_keys(apple_otid)
        b.click(b.driver.find_element(By.ID, "search"), "search")
        b.click(b.driver.find_element(By.CSS_SELECTOR, "a.subscription"), "timeline")
        timeline = b.text()
        check("Subscription " + apple_otid in timeline, "timeline title")
        check("signature verified" in timeline and "chain link holds" in timeline, "timeline verification marks")
        check("REFUND" in timeline, "the refunded subscription's REFUND is on its timeline")
        b.shot("timeline")
        b.shot("timeline", 390)

        # The refund cases, the WeChat case and its evidence.
        b.open("/audit/refunds?source=wechat")
        check("wechat:ORDER-UI-1" in b.text(), "the WeChat case is listed")
        b.shot("refund-cases")
        b.click(b.driver.find_element(By.LINK_TEXT, "wechat:ORDER-UI-1"), "refund case")
        case = b.text()
        check("Refund case wechat:ORDER-UI-1" in case and "refunded" in case, "the case page")
        check("The ledger’s answer" in case and "UNINTENDED_PURCHASE" in case, "inquiry and answer on the case page")
        b.shot("refund-case")
        b.shot("refund-case", 390)

        # A hostile order id is shown as text: no element, no alert.
        b.open("/audit/refunds/" + urllib.parse.quote("wechat:" + HOSTILE, safe=""))
        check(HOSTILE in b.text(), "the hostile id is shown as text")
        check(not b.driver.find_elements(By.CSS_SELECTOR, "main img, main script"), "no element came from the hostile id")
        try:
            b.driver.switch_to.alert
            fail("an alert opened")
        except NoAlertPresentException:
            pass

        # The page's CSV equals the API's, byte for byte.
        b.open("/audit/refunds")
        b.driver.find_element(By.ID, "csv").click()
        deadline = time.time() + 20
        files = []
        while time.time() < deadline:
            files = [f for f in os.listdir(b.downloads) if f.endswith(".csv")]  # not .crdownload: complete
            if files:
                break
            time.sleep(0.2)
        check(files, "the CSV was not downloaded")
        with open(os.path.join(b.downloads, files[0]), "rb") as f:
            downloaded = f.read()
        check(downloaded.startswith(b"# ledger refund export; position="), "the CSV names its position")
        # The page exports the projection as it stood; the ledger may append (an inquiry's answer, a
        # status check) between the click and this request, so ask the API for the position the
        # download names: the export is reproducible there, byte for byte.
        def named_position(csv):  # "# ledger refund export; position=N; …"
            return int(csv.split(b";", 2)[1].split(b"=", 1)[1])
        named = named_position(downloaded)
        status, _, api_csv = http(f"/v1/refunds?format=csv&asOfPosition={named}", token=AUDITOR)
        check(status == 200 and downloaded == api_csv,
              f"the downloaded CSV differs from GET /v1/refunds?format=csv&asOfPosition={named}")
        status, _, latest = http("/v1/refunds?format=csv", token=AUDITOR)
        check(status == 200 and named_position(latest) >= named,
              "the API's export is at or after the position the page's download names")

        b.open("/audit/projections")
        check("refund_cases" in b.text(), "projection status lists refund_cases")
        b.shot("projections")

        # The drift report, through the navigation: no reconciliation runs here, so its empty state,
        # but Apple's word is checked without one: the simulation ended one subscription with a
        # notification saying REVOKED (ui-test.sh: --disputed-statuses 1) that the ledger's fold
        # disagrees with (active). The check is kept by the catch-up worker: allow it a moment.
        b.click(b.driver.find_element(By.LINK_TEXT, "Drift report"), "drift report")
        check(b.driver.current_url.endswith("/audit/drift"), f"drift link: {b.driver.current_url}")
        deadline = time.time() + 20
        while not b.driver.find_elements(By.ID, "apple-status-disagreements") and time.time() < deadline:
            time.sleep(0.5)
            b.open("/audit/drift")
        rows = b.driver.find_elements(By.CSS_SELECTOR, "#apple-status-disagreements tbody tr")
        check(len(rows) == 1, f"one Apple status disagreement is listed, found {len(rows)}")
        row = rows[0].text
        check("BILLING" not in row and "REVOKED (5)" in row and "active (1)" in row, f"both statuses are shown: {row}")
        check("DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED" in row and "event " in row, f"the evidence is named: {row}")
        evidence = rows[0].find_element(By.CSS_SELECTOR, "a[href*='/audit/events/']").get_attribute("href")
        check(evidence.endswith("/raw"), f"the evidence links to the stored bytes: {evidence}")
        check(b.driver.find_element(By.ID, "apple-status-disagreeing").text == "1", "the count says one disagreement")
        status, _, body = http("/v1/admin/drift", token=AUDITOR)
        apple = json.loads(body).get("apple", {}) if status == 200 else {}
        check(apple.get("disagreeing") == 1 and apple["disagreements"][0]["appleStatus"] == 5
              and apple["disagreements"][0]["ledgerStatus"] == "active", f"GET /v1/admin/drift lists it too: {status} {body[:300]!r}")
        drift = b.text()
        check("No reconciliation has run yet" in drift and "ledger reconcile" in drift, f"drift empty state: {drift[:400]}")
        check(b.driver.find_element(By.CSS_SELECTOR, "nav a[aria-current]").text == "Drift report", "drift is the current page")
        b.shot("drift")
        b.shot("drift", 390)

        # The charts: the overview's four and one report's page, each against the API's CSV.
        # A failing webhook's retries append outbox events meanwhile, so the projection may move on
        # between the wait and the page: the page names a position within those two readings.
        position = reports_caught_up()
        b.open("/audit/reports")
        shown = re.search(r"As of log position (\d+),", b.text())
        after = reports_caught_up()
        check(shown and position <= int(shown.group(1)) <= after,
              f"the overview is read at the projection's position ({position}…{after}): {b.text()[:300]}")
        counts = {}
        for name in ["subscriptions", "movements", "refunds", "revenue"]:
            counts[name] = check_chart(b, b.driver.find_element(By.ID, f"chart-{name}"), name)
            check(counts[name] >= 12, f"{name}: a year of months, {counts[name]} points")
        b.shot("reports")
        b.shot("reports", 390)
        b.shot_overview()
        b.open("/audit/reports/subscriptions?interval=month")
        check_chart(b, b.driver.find_element(By.ID, "chart-subscriptions"), "subscriptions")
        b.shot("report-subscriptions")
        b.shot("report-subscriptions", 390)
        print(f"ui-test: chart points {counts}")

        # Webhooks, through the navigation: the endpoints (fingerprints, no secret), every event newest
        # first as the API lists it, a delivered attempt to `good` and a failed one to `bad` whose
        # hostile answer is shown as text (no alert, no console error, no CSP violation).
        events = webhooks_attempted()
        b.click(b.driver.find_element(By.LINK_TEXT, "Webhooks"), "webhooks")
        check(b.driver.current_url.endswith("/audit/webhooks"), f"webhooks link: {b.driver.current_url}")
        check(b.driver.find_element(By.CSS_SELECTOR, "nav a[aria-current]").text == "Webhooks", "webhooks is the current page")
        endpoints = [r.get_attribute("data-endpoint") for r in b.driver.find_elements(By.CSS_SELECTOR, "#endpoints tbody tr")]
        check(sorted(endpoints) == ["bad", "good"], f"both endpoints are listed: {endpoints}")
        check("whsec_" not in b.driver.page_source, "a secret is on the page")
        shown = [s.get_attribute("data-event-id") for s in b.driver.find_elements(By.CSS_SELECTOR, "section.webhook")]
        expected = [e["id"] for e in reversed(events)][:50]
        check(shown == expected, f"the page lists the API's events newest first: {shown[:5]} vs {expected[:5]}")
        check(b.driver.find_elements(By.CSS_SELECTOR, ".delivery[data-endpoint='good'][data-status='delivered']"),
              "a delivery to good is shown delivered")
        excerpts = [c.text for c in b.driver.find_elements(By.CSS_SELECTOR, ".delivery[data-endpoint='bad'] code.excerpt")]
        check('<script>alert("receiver")</script>' in excerpts, f"the bad receiver's answer is shown as text: {excerpts[:3]}")
        try:
            alert = b.driver.switch_to.alert
            fail(f"the receiver's answer ran: alert {alert.text!r}")
        except NoAlertPresentException:
            pass
        b.shot("webhooks")
        b.shot("webhooks", 390)
        receiver.shutdown()

        # Sign out: the pages are closed again.
        b.click(b.driver.find_element(By.ID, "logout"), "sign-out")
        check("/audit/login" in b.driver.current_url, f"after sign-out: {b.driver.current_url}")
        b.open("/audit/refunds")
        check("/audit/login" in b.driver.current_url, "signed out: the list needs a session again")
        b.shot("login", 390)
    finally:
        b.driver.quit()
    print(f"ui-test: browser steps passed in {time.time() - started:.1f} s")


if __name__ == "__main__":
    main()
