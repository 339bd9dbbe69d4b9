"""Storage that does not answer, for tests: TensorFlow's GCS client sent to a port nobody listens on.

``unreachable_gcs_environment()`` is the environment of a child process whose every gs:// request
fails to connect (its https proxy and metadata server a closed local port, a fake token), with
TensorFlow's retries bounded to one (GCS_RETRY_CONFIG_*, read at import), so it fails in seconds
as it would with no network. Returns (environment, the closed port).
"""
from __future__ import annotations

from support.processes import free_ports


def unreachable_gcs_environment() -> tuple[dict[str, str], int]:
    closed = free_ports(1)[0]  # bound and released: nobody listens there
    environment = {"https_proxy": f"http://127.0.0.1:{closed}", "HTTPS_PROXY": f"http://127.0.0.1:{closed}",
                   "GOOGLE_AUTH_TOKEN_FOR_TESTING": "fake", "NO_GCE_CHECK": "true",
                   "GCE_METADATA_HOST": f"127.0.0.1:{closed}", "GCE_METADATA_IP": f"127.0.0.1:{closed}",
                   "GCS_RETRY_CONFIG_MAX_RETRIES": "1", "GCS_RETRY_CONFIG_INIT_DELAY_TIME_US": "1000"}
    return environment, closed
