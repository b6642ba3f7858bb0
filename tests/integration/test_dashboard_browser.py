"""The dashboard in a real browser: Debian's headless Chromium driven by selenium.

Against real services (ZooKeeper, Kafka, PostgreSQL, Delta tables written
the way the controller's sink writes them): the page must list the stream,
its segments (a scaled stream: sealed and active ones), a *rendered* lag
chart (uPlot draws on a canvas), the rejected marks with their reason, the
writer holding the stream back (id, instance, first and last seen) on the
stream and in the page's "held back" list, a reader group with its lag, the
controller's last batch, the timeline counts, and a link to the stream's page
with its two charts. With 1 000 streams the page shows one page of them, and
the search and the page links reach any one. The
screenshot goes to ``tmp_path``; with ``TIDEMARK_SCREENSHOT_DIR`` set (a
test-only variable) also there -- ``docs/dashboard.png`` (on the HTTP API page of docs/)
comes from this test.

`make setup` installs ``chromium`` and ``chromium-driver`` with apt; nothing
is downloaded at test time (selenium is given both binaries' paths, so its
driver manager never runs).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tests.integration import test_reader_group as rg
from tests.integration.test_time_service import append_marks, serving
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.laggards import LAGGING, Laggard
from tidemark.controller.memory_store import MemoryStore
from tidemark.controller.metadata import new_stream_metadata
from tidemark.controller.model import KeyRange
from tidemark.controller.zookeeper.driver import job_path, write_json
from tidemark.pipelines.reading.group import ReaderGroup
from tidemark.pipelines.reading.lateness import append_laggards
from tidemark.pipelines.timeline.config import TimelineConfig
from tidemark.pipelines.timeline.store import TimelineStore
from tidemark.pipelines.writing.writer import EventWriter
from tidemark.schemas.arrow import REJECTED_ARROW
from tidemark.schemas.tables import REJECTED_MARKS, table_path

manager, settings, store, wconfig = rg.manager, rg.settings, rg.store, rg.wconfig

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture
def browser(tmp_path):
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.fail(
            f"{CHROMIUM} and {CHROMEDRIVER} are needed: `make setup` installs Debian's "
            "chromium and chromium-driver (apt-get, as root)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",  # root in CI
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1600",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(
        service=Service(CHROMEDRIVER, log_output=str(tmp_path / "chromedriver.log")),
        options=options,
    )
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def demo_history(stream, now_ms):
    """An hour of watermarks, one a minute, lag between 2 and ~40 s (a slow patch)."""
    marks = []
    segments = {0: 0, 1: 0}
    for seq in range(60):
        emitted = now_ms - (59 - seq) * 60_000
        lag = 2_000 + (35_000 if 25 <= seq < 32 else 0) + (seq % 5) * 400
        segments = {s: o + 37 + 3 * s for s, o in segments.items()}
        marks.append((seq, emitted - lag, emitted - lag + 900, dict(segments)))
    return marks


def write_rejected(root, stream):
    now = int(time.time() * 1000)
    rows = [
        (stream, "sensor-7", "stale_time", 0, 412, now - 300_000),
        (stream, "sensor-9", "regressed_position", 0, 518, now - 120_000),
    ]
    write_deltalake(
        table_path(root, REJECTED_MARKS),
        pa.table(
            {
                "stream": [r[0] for r in rows],
                "writer": [r[1] for r in rows],
                "reason": [r[2] for r in rows],
                "raw": [None for _ in rows],
                "kafka_partition": [r[3] for r in rows],
                "kafka_offset": [r[4] for r in rows],
                "at": [r[5] for r in rows],
            },
            schema=REJECTED_ARROW,
        ),
        mode="append",
    )


def test_dashboard_shows_stream_segments_and_lag_chart(
    browser, store, zk_client, manager, kafka, postgres, unique, tmp_path, settings, wconfig
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    root = str(tmp_path / "delta")
    stream = "demo/sensors"  # ZooKeeper is chrooted per test; the topic is this test's alone
    manager.create_scope("demo")
    manager.create(stream, StreamConfiguration(ScalingPolicy.fixed(2)))
    manager.scale(stream, [0], [KeyRange(0.0, 0.25), KeyRange(0.25, 0.5)])
    now = int(time.time() * 1000)
    append_marks(root, stream, demo_history(stream, now), emitted_step_ms=60_000)
    write_rejected(root, stream)
    holder = Laggard(
        stream, "sensor-3", LAGGING, now - 90_000, now - 60_000, 75_000, now - 50_000, now,
        "9f3c2a", now - 3_600_000, now - 45_000,
    )  # fmt: skip
    append_laggards(root, stream, now, [holder])
    timelines = TimelineStore(postgres)
    timelines.migrate()
    timeline = f"reminders_{unique}"
    timelines.create_timeline(TimelineConfig(timeline))
    for i in range(5):
        timelines.create(
            timeline, b"hello", timestamp_ms=now - 60_000 + i * 30_000, producer_group="signup"
        )
    timelines.close()
    with EventWriter("sensor-1", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        for i in range(7):
            w.write(b"reading", f"k{i}", timestamp=now - 10_000 + i)
    group = f"alerts{unique}"
    ReaderGroup.create(group, stream, **rg.group_kw(store, kafka, root)).close()  # read nothing
    batch = {"leader": "driver-a", "batch_id": 4711, "at_ms": now - 2_000, "watermarks": 12,
             "rejected": 1, "write_ms": 340, "spark_ms": 200, "delta_ms": 140}  # fmt: skip
    write_json(zk_client, f"{job_path(settings.zk_root, settings.marks_topic)}/progress", batch)

    with serving(
        store, zk_client, root, kafka, settings, postgres_dsn=postgres, refresh_ms=100
    ) as running:
        browser.get(running.url + "/")
        wait = WebDriverWait(browser, 30)
        card = wait.until(
            ec.presence_of_element_located(
                (By.CSS_SELECTOR, f'article.stream[data-stream="{stream}"]')
            )
        )
        # segments: epoch 1 is current (segment 1 and the two successors of 0), 0 is sealed
        active = {
            int(e.get_attribute("data-segment-id"))
            for e in card.find_elements(By.CSS_SELECTOR, ".segment.active")
        }
        sealed = {
            int(e.get_attribute("data-segment-id"))
            for e in card.find_elements(By.CSS_SELECTOR, ".segment.sealed")
        }
        assert active == {1, (1 << 32) | 2, (1 << 32) | 3}
        assert {0, 1} <= sealed
        # the lag chart is drawn: uPlot made a canvas with a size, and 60 points went in
        chart = card.find_element(By.CSS_SELECTOR, ".lag-chart")
        wait.until(lambda _: chart.get_attribute("data-rendered") == "true")
        canvas = chart.find_element(By.CSS_SELECTOR, ".uplot canvas")
        assert canvas.size["width"] > 300 and canvas.size["height"] > 100
        points = browser.execute_script(
            "return JSON.parse(arguments[0].querySelector('script').textContent)"
            ".emitted_at_ms.length",
            chart,
        )
        assert points == 60
        drawn = browser.execute_script(
            "var c = arguments[0], d = c.getContext('2d').getImageData(0, 0, c.width, c.height)"
            ".data; for (var i = 0; i < d.length; i += 4) { if (d[i] > 150 && d[i+1] < 90"
            " && d[i+2] < 90 && d[i+3] > 0) return true; } return false;",
            canvas,
        )
        assert drawn, "no red (lag series) pixel on the chart's canvas"
        reasons = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#rejected .reason")]
        assert {"stale_time", "regressed_position"} <= set(reasons)
        (held,) = card.find_elements(By.CSS_SELECTOR, "table.laggards tr.laggard")
        cells = {
            name: held.find_element(By.CSS_SELECTOR, f".{name}").text
            for name in ("writer", "instance", "kind", "first-seen", "last-seen")
        }
        assert cells["writer"] == "sensor-3" and cells["instance"] == "9f3c2a"
        assert cells["kind"] == "lagging" and cells["first-seen"] and cells["last-seen"] != "-"
        timeline_rows = browser.find_element(By.CSS_SELECTOR, "#timelines").text
        assert timeline in timeline_rows
        # what an operator asks first: who holds it back, which group lags, the last batch
        (top,) = browser.find_elements(By.CSS_SELECTOR, "#held-back tr.laggard")
        assert top.find_element(By.CSS_SELECTOR, ".writer").text == "sensor-3"
        assert stream in top.text
        row = browser.find_element(By.CSS_SELECTOR, f'#groups tr.group[data-group="{group}"]')
        assert row.find_element(By.CSS_SELECTOR, ".records").text == "7"
        assert row.find_element(By.CSS_SELECTOR, ".time-lag").text == "no time yet"
        last = browser.find_element(By.CSS_SELECTOR, "#controller table.last-batch")
        assert last.find_element(By.CSS_SELECTOR, ".batch-id").text == "4711"
        assert last.find_element(By.CSS_SELECTOR, ".watermarks").text == "12"
        assert "driver-a" in last.text and "340 ms" in last.text

        shot = tmp_path / "dashboard.png"
        browser.save_screenshot(str(shot))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        target = os.environ.get("TIDEMARK_SCREENSHOT_DIR")
        if target:
            shutil.copy(shot, Path(target) / "dashboard.png")

        card.find_element(By.CSS_SELECTOR, "a.stream-link").click()
        page = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "article.stream-page")))
        assert page.get_attribute("data-stream") == stream
        assert browser.current_url.endswith(f"/streams/{stream}")
        for kind in ("time-chart", "lag-chart"):
            el = page.find_element(By.CSS_SELECTOR, f".{kind}")
            wait.until(lambda _, el=el: el.get_attribute("data-rendered") == "true")
            assert el.find_element(By.CSS_SELECTOR, ".uplot canvas").size["width"] > 300
        rows = page.find_elements(By.CSS_SELECTOR, "table.watermarks tr")
        assert len(rows) == 21  # header + the latest 20
        holders = page.find_elements(By.CSS_SELECTOR, "table.laggards tr.laggard .writer")
        assert [e.text for e in holders] == ["sensor-3"]


def test_a_thousand_streams_a_page_at_a_time_with_search(browser, zk_client, kafka, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    from tidemark.service.listing import PAGE_SIZE
    from tidemark.service.server import RunningService
    from tidemark.service.state import TimeService

    many = MemoryStore()  # metadata only: no topic is needed to list a stream
    for scope in ("shop", "iot"):
        many.create_scope(scope)
    names = [f"{'shop' if i % 2 else 'iot'}/s{i:04d}" for i in range(1000)]
    for name in names:
        many.create_stream(new_stream_metadata(name, StreamConfiguration(), now_ms=0))
    service = TimeService(many, zk_client, str(tmp_path / "delta"), bootstrap_servers=kafka)
    with RunningService(service) as running:
        started = time.monotonic()
        browser.get(running.url + "/?sort=name")
        loaded_s = time.monotonic() - started
        cards = browser.find_elements(By.CSS_SELECTOR, "article.stream")
        assert len(cards) == PAGE_SIZE
        assert cards[0].get_attribute("data-stream") == "iot/s0000"
        assert "page 1 of 40" in browser.find_element(By.CSS_SELECTOR, ".pager").text
        assert "1000 of 1000" in browser.find_element(By.CSS_SELECTOR, "#streams h2").text
        print(f"dashboard with 1 000 streams: first page loaded in {loaded_s:.2f} s")

        browser.find_element(By.CSS_SELECTOR, ".pager a.next").click()
        WebDriverWait(browser, 30).until(ec.url_contains("page=2"))
        cards = browser.find_elements(By.CSS_SELECTOR, "article.stream")
        assert cards[0].get_attribute("data-stream") == sorted(names)[PAGE_SIZE]

        search = browser.find_element(By.CSS_SELECTOR, "#stream-search input[name=q]")
        search.clear()
        search.send_keys("shop/s09")
        browser.find_element(By.CSS_SELECTOR, "#stream-search button").click()
        WebDriverWait(browser, 30).until(ec.url_contains("q=shop"))
        shown = [
            e.get_attribute("data-stream")
            for e in browser.find_elements(By.CSS_SELECTOR, "article.stream")
        ]
        assert shown == sorted(n for n in names if n.startswith("shop/s09"))[:PAGE_SIZE]
        assert "50 of 1000" in browser.find_element(By.CSS_SELECTOR, "#streams h2").text


def test_the_dashboard_of_an_empty_system_says_what_is_missing(browser, zk_client, kafka, tmp_path):
    """No streams, no Delta tables, no controller, and a database that does not answer:
    the page renders in the browser and names each missing piece."""
    from selenium.webdriver.common.by import By

    from tests.integration.test_service_empty_system import free_port, serve

    dead = f"postgresql://tidemark@127.0.0.1:{free_port()}/none"
    with serve(zk_client, tmp_path / "delta", kafka, dead) as running:
        browser.get(running.url + "/")
        assert "500" not in browser.title
        text = browser.find_element(By.TAG_NAME, "body").text
        assert "Streams" in text and "Controller" in text
        assert "(none running)" in text  # no controller yet
        timelines = browser.find_element(By.CSS_SELECTOR, "#timelines").text
        assert "postgresql is unavailable" in timelines
