"""How the benchmark finds and measures a broker process (loopback socket, no broker)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from benchmarks import amqp_brokers as brokers


def test_listening_pid_finds_the_process_that_listens_on_a_port() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        assert brokers.listening_pid(port) == os.getpid()
        target = brokers.BrokerTarget.at("x", f"amqp://guest:guest@127.0.0.1:{port}/")
        assert target.pid == os.getpid()
        assert brokers.port_open(target.url)
    assert brokers.listening_pid(port) is None
    assert not brokers.port_open(f"amqp://127.0.0.1:{port}/", timeout_s=0.5)


def test_process_stats_reads_cpu_and_memory_of_a_process() -> None:
    stats = brokers.ProcessStats(os.getpid())
    first = stats.sample()
    assert first is not None
    assert first.rss_bytes > 0
    assert first.hwm_bytes >= first.rss_bytes
    assert stats.peak_rss_bytes == first.rss_bytes
    sum(i * i for i in range(200_000))  # burn a little CPU
    second = stats.sample()
    assert second is not None
    assert second.cpu_s >= first.cpu_s
    assert second.runq_wait_s >= first.runq_wait_s >= 0.0
    assert brokers.ProcessStats(None).sample() is None


def test_process_stats_sums_the_processes_of_a_cluster() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        alone = brokers.ProcessStats(os.getpid()).sample()
        other = brokers.ProcessStats(child.pid).sample()
        both = brokers.ProcessStats(os.getpid(), (child.pid,)).sample()
        assert alone is not None
        assert other is not None
        assert both is not None
        # RSS moves a little between the samples; the sum holds both processes
        assert both.rss_bytes > alone.rss_bytes + other.rss_bytes // 2
        assert both.cpu_s >= alone.cpu_s
    finally:
        child.kill()
        child.wait(timeout=10)
    assert brokers.ProcessStats(os.getpid(), (child.pid,)).sample() is None  # one is gone
