"""Contract of the file endpoints: upload, list, read, download, delete, and their errors."""

from __future__ import annotations

import io

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from mosoo_core import files
from mosoo_core.tables.files import StoredFile
from mosoo_core.tables.sessions import SessionRun
from mosoo_web.api.v1.files import content_disposition
from tests.api.conftest import ApiOwner


def _upload(
    client: TestClient,
    owner: ApiOwner,
    name: str = "notes.txt",
    data: bytes = b"hello",
    media_type: str = "text/plain",
) -> dict:
    response = client.post(
        f"/api/v1/agents/{owner.agent_id}/files",
        headers=owner.headers,
        files={"file": (name, data, media_type)},
    )
    assert response.status_code == 201, response.text
    return dict(response.json())


def _code(response) -> str:  # type: ignore[no-untyped-def]
    return str(response.json()["error"]["code"])


def test_upload_stores_the_file_unbound_until_a_message_names_it(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    uploaded = _upload(client, owner, data=b"quarterly numbers")
    assert (
        uploaded["kind"] == "attachment"
        and uploaded["status"] == "ready"
        and uploaded["thread_id"] is None
    )
    assert (
        uploaded["name"] == "notes.txt"
        and uploaded["size"] == 17
        and uploaded["media_type"] == "text/plain"
    )
    assert "object_key" not in uploaded

    created = client.post(
        f"/api/v1/agents/{owner.agent_id}/threads",
        headers=owner.headers,
        json={"message": "Summarise the file", "file_ids": [uploaded["id"]]},
    ).json()
    thread_id, run_id = created["thread"]["id"], created["run"]["id"]
    listed = client.get(f"/api/v1/threads/{thread_id}/files", headers=owner.headers).json()["files"]
    assert [f["id"] for f in listed] == [uploaded["id"]] and listed[0]["thread_id"] == thread_id
    with Session(api_env) as db:
        run = db.get(SessionRun, run_id)
        assert run is not None and [a["file_id"] for a in run.attachments] == [uploaded["id"]]


def test_files_of_another_thread_cannot_be_attached(client: TestClient, owner: ApiOwner) -> None:
    uploaded = _upload(client, owner)
    first = client.post(
        f"/api/v1/agents/{owner.agent_id}/threads",
        headers=owner.headers,
        json={"message": "one", "file_ids": [uploaded["id"]]},
    )
    assert first.status_code == 201
    second = client.post(
        f"/api/v1/agents/{owner.agent_id}/threads",
        headers=owner.headers,
        json={"message": "two", "file_ids": [uploaded["id"]]},
    )
    assert second.status_code in (400, 404) and _code(second) in ("invalid_request", "not_found")


def test_file_ids_need_a_message(client: TestClient, owner: ApiOwner) -> None:
    uploaded = _upload(client, owner)
    response = client.post(
        f"/api/v1/agents/{owner.agent_id}/threads",
        headers=owner.headers,
        json={"file_ids": [uploaded["id"]]},
    )
    assert response.status_code == 400 and response.json()["error"]["field"] == "file_ids"


@pytest.mark.parametrize(
    ("hostile", "expected"),
    [
        ("../../etc/passwd", "passwd"),
        ("/abs/path/report.pdf", "report.pdf"),
        ("evil\u202egpj.exe", "evilgpj.exe"),
    ],
)
def test_hostile_names_are_cleaned(
    client: TestClient, owner: ApiOwner, hostile: str, expected: str
) -> None:
    assert _upload(client, owner, name=hostile)["name"] == expected


def test_names_with_nothing_usable_are_refused(client: TestClient, owner: ApiOwner) -> None:
    response = client.post(
        f"/api/v1/agents/{owner.agent_id}/files",
        headers=owner.headers,
        files={"file": ("..", b"x", "text/plain")},
    )
    assert response.status_code == 400 and _code(response) == "invalid_request"


def test_upload_over_64_mib_is_payload_too_large(
    client: TestClient, owner: ApiOwner, api_env: Engine
) -> None:
    response = client.post(
        f"/api/v1/agents/{owner.agent_id}/files",
        headers=owner.headers,
        files={
            "file": (
                "big.bin",
                io.BytesIO(b"\0" * (files.MAX_FILE_BYTES + 1)),
                "application/octet-stream",
            )
        },
    )
    assert response.status_code == 413 and _code(response) == "payload_too_large"
    with Session(api_env) as db:
        assert db.exec(select(StoredFile)).all() == []


def test_declared_length_over_the_limit_is_refused_before_reading(
    client: TestClient, owner: ApiOwner
) -> None:
    def body():  # type: ignore[no-untyped-def]
        yield b"--x\r\n"

    response = client.post(
        f"/api/v1/agents/{owner.agent_id}/files",
        headers={
            **owner.headers,
            "Content-Type": "multipart/form-data; boundary=x",
            "Content-Length": str(200 * 1024 * 1024),
        },
        content=body(),
    )
    assert response.status_code == 413 and _code(response) == "payload_too_large"


def test_upload_needs_a_multipart_file_field(client: TestClient, owner: ApiOwner) -> None:
    url = f"/api/v1/agents/{owner.agent_id}/files"
    not_multipart = client.post(url, headers=owner.headers, json={"file": "x"})
    assert not_multipart.status_code == 400 and not_multipart.json()["error"]["field"] == "file"
    wrong_field = client.post(
        url, headers=owner.headers, files={"document": ("a.txt", b"x", "text/plain")}
    )
    assert wrong_field.status_code == 400 and wrong_field.json()["error"]["field"] == "file"
    unknown_agent = client.post(
        "/api/v1/agents/nope/files", headers=owner.headers, files={"file": ("a.txt", b"x")}
    )
    assert unknown_agent.status_code == 404 and _code(unknown_agent) == "not_found"


def test_get_download_and_delete_a_file(client: TestClient, owner: ApiOwner) -> None:
    uploaded = _upload(
        client,
        owner,
        name="résumé final.html",
        data=b"<script>alert(1)</script>",
        media_type="text/html",
    )
    fetched = client.get(f"/api/v1/files/{uploaded['id']}", headers=owner.headers)
    assert fetched.status_code == 200 and fetched.json() == uploaded

    content = client.get(f"/api/v1/files/{uploaded['id']}/content", headers=owner.headers)
    assert content.status_code == 200 and content.content == b"<script>alert(1)</script>"
    disposition = content.headers["content-disposition"]
    assert (
        disposition
        == "attachment; filename=\"r_sum_ final.html\"; filename*=UTF-8''r%C3%A9sum%C3%A9%20final.html"
    )
    assert content.headers["x-content-type-options"] == "nosniff"
    assert content.headers["content-length"] == str(len(b"<script>alert(1)</script>"))

    deleted = client.delete(f"/api/v1/files/{uploaded['id']}", headers=owner.headers)
    assert deleted.status_code == 200 and deleted.json() == {"id": uploaded["id"], "deleted": True}
    for response in (
        client.get(f"/api/v1/files/{uploaded['id']}", headers=owner.headers),
        client.get(f"/api/v1/files/{uploaded['id']}/content", headers=owner.headers),
        client.delete(f"/api/v1/files/{uploaded['id']}", headers=owner.headers),
    ):
        assert response.status_code == 404 and _code(response) == "not_found"


def test_thread_files_list_by_ids_and_delete_only_the_threads_own(
    client: TestClient, owner: ApiOwner
) -> None:
    a, b, loose = (
        _upload(client, owner, "a.txt", b"a"),
        _upload(client, owner, "b.txt", b"b"),
        _upload(client, owner, "c.txt", b"c"),
    )
    thread_id = client.post(
        f"/api/v1/agents/{owner.agent_id}/threads",
        headers=owner.headers,
        json={"message": "two files", "file_ids": [a["id"], b["id"]]},
    ).json()["thread"]["id"]
    url = f"/api/v1/threads/{thread_id}/files"
    assert [f["id"] for f in client.get(url, headers=owner.headers).json()["files"]] == [
        a["id"],
        b["id"],
    ]
    picked = client.get(url, headers=owner.headers, params={"ids": [b["id"], loose["id"]]}).json()[
        "files"
    ]
    assert [f["id"] for f in picked] == [b["id"]]

    refused = client.delete(f"{url}/{loose['id']}", headers=owner.headers)
    assert refused.status_code == 404 and _code(refused) == "not_found"
    assert client.get(f"/api/v1/files/{loose['id']}", headers=owner.headers).status_code == 200
    removed = client.delete(f"{url}/{a['id']}", headers=owner.headers)
    assert removed.status_code == 200
    assert [f["id"] for f in client.get(url, headers=owner.headers).json()["files"]] == [b["id"]]
    assert client.get("/api/v1/threads/unknown/files", headers=owner.headers).status_code == 404


def test_content_disposition_cannot_be_broken_out_of() -> None:
    header = content_disposition('a"b\\c\r\nSet-Cookie: x.txt')
    fallback = header.split('filename="', 1)[1].split('"', 1)[0]
    assert fallback == "a_b_c__Set-Cookie: x.txt"
    assert "\r" not in header and "\n" not in header
    assert header.endswith("filename*=UTF-8''a%22b%5Cc%0D%0ASet-Cookie%3A%20x.txt")
