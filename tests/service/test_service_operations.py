"""What an operator sets up: a TOML config for ``serve``, its log level and JSON access
log (no query text, no key), HTTPS, and windows that rotate on a schedule (with the
spent budget's ``Retry-After`` read from it)."""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import time
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tests.service.conftest import Server

from ragprivacy.cli import main
from ragprivacy.service import ServiceState
from ragprivacy.service.schedule import WindowSchedule, parse_period, seconds_until_rotation

SECRET = "Which patient named Quorn has asthma?"


def _state(
    tmp_path: Path, admin, corpus_file, *, rate: int = 5, window: bool = True
) -> tuple[Path, str]:  # type: ignore[no-untyped-def]
    state = tmp_path / "state"
    admin(state, "tenant", "create", "clinic", "--k", "2")
    admin(state, "docs", "add", "clinic", str(corpus_file(tmp_path / "c.jsonl", "clinic", 8)))
    admin(state, "account", "create", "clinic", "alice", "--eps", "4", "--delta", "1e-6",
          "--rate-limit", str(rate))  # fmt: skip
    key = admin(state, "key", "create", "alice").split()[-1]
    if window:
        admin(state, "window", "open")
    return state, key


def test_a_toml_config_and_a_json_access_log_without_secrets(
    tmp_path: Path, admin, corpus_file, server_factory
) -> None:  # type: ignore[no-untyped-def]
    state, key = _state(tmp_path, admin, corpus_file)
    config = tmp_path / "serve.toml"
    config.write_text('api-docs = true\nlog-level = "info"\nmax_inflight = 4\n')
    server = server_factory(state, extra=("--config", str(config)))
    assert httpx.get(f"{server.url}/openapi.json").status_code == 200  # from the file
    headers = {"Authorization": f"Bearer {key}"}
    for _ in range(2):
        r = httpx.post(f"{server.url}/v1/retrieve", json={"query": SECRET}, headers=headers)
        assert r.status_code == 200, r.text
    httpx.post(f"{server.url}/v1/retrieve", json={"query": SECRET},
               headers={"Authorization": "Bearer rpk_nope_nope"})  # fmt: skip
    out = server.stop()
    lines = [json.loads(x) for x in out.splitlines() if x.startswith('{"method"')]
    retrieves = [x for x in lines if x["path"] == "/v1/retrieve"]
    assert [x["status"] for x in retrieves] == [200, 200, 401]
    assert all(set(x) == {"method", "path", "status", "ms", "client"} for x in lines)
    assert SECRET not in out and key not in out and "rpk_" not in out


def test_a_bad_config_or_option_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.toml"
    bad.write_text("prot = 8000\n")
    assert main(["serve", "--config", str(bad)]) == 2
    assert "did you mean 'port'" in capsys.readouterr().err
    bad.write_text("port = [\n")
    assert main(["serve", "--config", str(bad)]) == 2
    assert "not TOML" in capsys.readouterr().err
    assert main(["serve", "--state", str(tmp_path), "--log-level", "loud"]) == 2
    assert main(["serve", "--state", str(tmp_path), "--rotate-every", "5s"]) == 2
    assert "at least 1m" in capsys.readouterr().err
    assert main(["serve", "--state", str(tmp_path), "--ssl-certfile", "c.pem"]) == 2
    assert "both --ssl-certfile and --ssl-keyfile" in capsys.readouterr().err


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    certfile, keyfile = tmp_path / "cert.pem", tmp_path / "key.pem"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return certfile, keyfile


def test_https_with_the_operator_s_certificate(tmp_path: Path, admin, corpus_file) -> None:  # type: ignore[no-untyped-def]
    state, key = _state(tmp_path, admin, corpus_file)
    certfile, keyfile = _self_signed(tmp_path)
    server = Server(state, scheme="https", extra=("--ssl-certfile", str(certfile),
                                                  "--ssl-keyfile", str(keyfile)))  # fmt: skip
    try:
        trusted = ssl.create_default_context(cafile=str(certfile))
        headers = {"Authorization": f"Bearer {key}"}
        r = httpx.post(
            f"{server.url}/v1/retrieve", json={"query": "asthma"}, headers=headers, verify=trusted
        )
        assert r.status_code == 200, r.text
        with pytest.raises(httpx.HTTPError):  # plain HTTP is not served on that port
            httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5)
    finally:
        server.stop()


def test_the_schedule_opens_and_rotates_windows_with_their_packages(
    tmp_path: Path, admin, corpus_file
) -> None:  # type: ignore[no-untyped-def]
    state, _ = _state(tmp_path, admin, corpus_file, window=False)

    def factory() -> ServiceState:
        return ServiceState(state, create=False)

    hourly = WindowSchedule(factory, 3600, tmp_path / "aud")
    assert hourly.step() == 3600  # no window: one is opened
    st = ServiceState(state, create=False)
    assert [w.window_id for w in st.open_windows()] == ["W1"]
    assert 0 < hourly.step() <= 3600  # not yet an hour old: nothing rotates
    assert hourly.rotations == 0
    quick = WindowSchedule(factory, 1, tmp_path / "aud")
    time.sleep(1.1)  # the window is now over a period old, however busy the machine
    assert quick.step() == 1
    assert quick.rotations == 1
    assert [w.window_id for w in st.open_windows()] == ["W2"]
    assert st.window("W1").status == "closed"
    assert (tmp_path / "aud" / "W1" / "auditor.json").is_file()
    st.close()
    assert parse_period("1d") == 86400 and parse_period("90m") == 5400
    assert seconds_until_rotation(0, 60, now=59.5) == 1 and seconds_until_rotation(0, 60, 0) == 60


def test_a_spent_budget_says_when_the_scheduled_window_opens(
    tmp_path: Path, admin, corpus_file, server_factory
) -> None:  # type: ignore[no-untyped-def]
    state, key = _state(tmp_path, admin, corpus_file, rate=1)
    server = server_factory(state, extra=("--rotate-every", "2h"))
    headers = {"Authorization": f"Bearer {key}"}
    assert (
        httpx.post(f"{server.url}/v1/retrieve", json={"query": "a"}, headers=headers).status_code
        == 200
    )
    over = httpx.post(f"{server.url}/v1/retrieve", json={"query": "b"}, headers=headers)
    assert over.status_code == 429
    assert 3600 < int(over.headers["Retry-After"]) <= 7200  # the window's end, not an hour


def _sample(text: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


def test_prometheus_metrics_across_workers_name_no_account_or_query(
    tmp_path: Path, admin, corpus_file, server_factory
) -> None:  # type: ignore[no-untyped-def]
    state, key = _state(tmp_path, admin, corpus_file, rate=2)
    plain = server_factory(state)
    assert httpx.get(f"{plain.url}/metrics").status_code == 404  # off unless asked
    plain.stop()
    server = server_factory(state, workers=2, extra=("--metrics",))
    headers = {"Authorization": f"Bearer {key}"}
    url = f"{server.url}/v1/retrieve"
    codes = [httpx.post(url, json={"query": SECRET}, headers=headers).status_code
             for _ in range(3)]  # fmt: skip
    assert codes == [200, 200, 429]
    assert httpx.post(url, json={"query": SECRET}, headers={"Authorization": "Bearer x"}
                      ).status_code == 401  # fmt: skip
    assert httpx.post(url, json={"nope": 1}, headers=headers).status_code == 422
    text = httpx.get(f"{server.url}/metrics").text
    assert _sample(text, "ragprivacy_requests_total", route="/v1/retrieve", status="200") == 2
    assert _sample(text, "ragprivacy_refusals_total", reason="budget_exhausted") == 1
    assert _sample(text, "ragprivacy_refusals_total", reason="malformed_request") == 1
    assert _sample(text, "ragprivacy_refusals_total") == 3  # and the bad key
    assert _sample(text, "ragprivacy_charged_total", route="/v1/retrieve") == 2
    assert _sample(text, "ragprivacy_epsilon_spent_total", route="/v1/retrieve") > 0
    assert _sample(text, "ragprivacy_ledger_records") == 2
    assert 0 <= _sample(text, "ragprivacy_window_age_seconds") < 3600
    assert "alice" not in text and SECRET not in text and key not in text


def test_sigterm_stops_within_the_graceful_timeout_while_an_answer_hangs(
    tmp_path: Path, admin, corpus_file
) -> None:  # type: ignore[no-untyped-def]
    import os
    import signal
    import threading

    from tests._chat_endpoint import Endpoint, chat_reply

    def hang(_: dict[str, object]) -> tuple[int, object]:
        time.sleep(120)
        return chat_reply("late")

    state, key = _state(tmp_path, admin, corpus_file)
    upstream = Endpoint(hang)
    server = Server(state, extra=("--generator", f"openai:m@{upstream.url}",
                                  "--graceful-timeout", "1"))  # fmt: skip
    try:
        ask = threading.Thread(
            target=lambda: httpx.post(f"{server.url}/v1/answer", json={"query": "asthma"},
                                      headers={"Authorization": f"Bearer {key}"}, timeout=180),
            daemon=True,
        )  # fmt: skip
        ask.start()
        deadline = time.monotonic() + 60
        while upstream.calls == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert upstream.calls == 1  # the answer is waiting on the generator
        os.killpg(server.proc.pid, signal.SIGTERM)
        server.proc.wait(timeout=20)  # not the 120 s the answer would take, nor the default 30
    finally:
        server.stop(signal.SIGKILL)
        upstream.close()


def test_a_connection_trickling_its_headers_is_closed(tmp_path: Path, admin, corpus_file) -> None:  # type: ignore[no-untyped-def]
    """A client that opens a connection and never finishes its request head is cut off
    after --header-timeout; a normal request is served."""
    import socket

    state, _ = _state(tmp_path, admin, corpus_file)
    server = Server(state, extra=("--header-timeout", "1"))
    try:
        slow = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # the head never ends
        start = time.monotonic()
        closed = slow.recv(1024)  # blocks until the service closes the connection
        assert closed == b"" and time.monotonic() - start < 30
        slow.close()
        assert httpx.get(f"{server.url}/healthz", timeout=30).status_code == 200
    finally:
        server.stop()


def test_the_documented_config_file_names_only_serve_options() -> None:
    """docs/service.md's TOML example is a config `serve --config` takes: every key is an
    option of serve's, and its values are of the option's kind."""
    import inspect
    import re
    import tomllib

    from ragprivacy.cli.serve_cmd import serve

    doc = (Path(__file__).resolve().parents[2] / "docs" / "service.md").read_text()
    (block,) = re.findall(r"```toml\n(.*?)```", doc, flags=re.S)
    values = tomllib.loads(block)
    params = inspect.signature(serve).parameters
    for key, value in values.items():
        name = key.replace("-", "_")
        assert name in params and name != "config", key
        default = params[name].default.default  # typer's OptionInfo
        if default is not None and not isinstance(default, bool):
            assert isinstance(value, type(default)), (key, value)


def test_private_requests_past_the_total_wait_their_turn(
    tmp_path: Path, admin, corpus_file
) -> None:  # type: ignore[no-untyped-def]
    """--max-inflight-total 1: three accounts' answers at once reach the generator one at
    a time, all answered (queued, not refused), and the public routes are served."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from tests._chat_endpoint import Endpoint, chat_reply

    running, peak, lock = [0], [0], threading.Lock()

    def slow(_: dict[str, object]) -> tuple[int, object]:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.5)
        with lock:
            running[0] -= 1
        return chat_reply("noted")

    state = tmp_path / "state"
    admin(state, "tenant", "create", "clinic", "--k", "2")
    admin(state, "docs", "add", "clinic", str(corpus_file(tmp_path / "c.jsonl", "clinic", 8)))
    keys = []
    for name in ("a", "b", "c"):
        admin(state, "account", "create", "clinic", name, "--eps", "4", "--delta", "1e-6",
              "--rate-limit", "5")  # fmt: skip
        keys.append(admin(state, "key", "create", name).split()[-1])
    admin(state, "window", "open")
    upstream = Endpoint(slow)
    server = Server(state, extra=("--generator", f"openai:m@{upstream.url}",
                                  "--max-inflight-total", "1"))  # fmt: skip
    try:

        def ask(key: str) -> int:
            return httpx.post(f"{server.url}/v1/answer", json={"query": "asthma"},
                              headers={"Authorization": f"Bearer {key}"},
                              timeout=120).status_code  # fmt: skip

        with ThreadPoolExecutor(3) as pool:
            answers = [pool.submit(ask, k) for k in keys]
            assert httpx.get(f"{server.url}/v1/audit/windows", timeout=120).status_code == 200
            assert [f.result() for f in answers] == [200, 200, 200]
        assert peak[0] == 1  # one private request at a time reached the generator
    finally:
        server.stop()
        upstream.close()
