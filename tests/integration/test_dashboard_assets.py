"""The management listener serves the dashboard: ``/`` is the page, and every file it
loads (scripts, styles, icon, the scripts' own imports) comes from ``/static`` with a type
the browser accepts; nothing is loaded from another origin."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.conftest import node_under_test

_REFERENCE = re.compile(r'(?:src|href)="([^"#]+)"')
_IMPORT = re.compile(r'from "\./([^"]+)"')


def test_the_page_and_every_asset_it_loads_are_served(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with node_under_test(tmp_path_factory, http=True) as server:  # a node under workers
        base = f"http://127.0.0.1:{server.management_port}/"
        with httpx.Client(base_url=base, timeout=30) as http:
            page = http.get("/")
            assert page.status_code == 200
            assert page.headers["content-type"].startswith("text/html")
            references = _REFERENCE.findall(page.text)
            assert "static/app.js" in references and "static/style.css" in references
            assert not [ref for ref in references if "//" in ref], "everything ships locally"
            pending = list(references)
            seen: set[str] = set()
            while pending:
                path = pending.pop()
                if path in seen:
                    continue
                seen.add(path)
                response = http.get(path)
                assert response.status_code == 200, path
                kind = response.headers["content-type"]
                if path.endswith(".js"):
                    assert kind.startswith("text/javascript"), (path, kind)
                    pending.extend(f"static/{name}" for name in _IMPORT.findall(response.text))
                elif path.endswith(".css"):
                    assert kind.startswith("text/css"), (path, kind)
            assert {"static/api.js", "static/chart.js", "static/queues.js"} <= seen
            assert http.get("/static/no-such-file.js").status_code == 404
