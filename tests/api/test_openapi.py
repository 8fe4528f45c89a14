"""The OpenAPI document at /api/v1/openapi.json is valid and documents every operation fully."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from openapi_spec_validator import validate

from tests.api.conftest import ApiOwner


def test_openapi_document_validates_and_needs_no_token(client: TestClient) -> None:
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    document = response.json()
    validate(document)
    assert document["info"]["title"] == "Mosoo API"
    assert document["servers"] == [{"url": "/api/v1"}]
    assert document["components"]["securitySchemes"]["AccessToken"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "mst_…",
        "description": document["components"]["securitySchemes"]["AccessToken"]["description"],
    }


def test_every_operation_is_described_secured_and_documents_its_errors(client: TestClient) -> None:
    document = client.get("/api/v1/openapi.json").json()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            where = f"{method.upper()} {path}"
            assert operation.get("summary") and operation.get("operationId"), where
            assert operation.get("security") == [{"AccessToken": []}], where
            responses = operation["responses"]
            for status in ("400", "401", "429", "500"):
                assert responses[status]["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/ErrorResponse"
                }, (where, status)
            assert "Retry-After" in responses["429"]["headers"], where
            assert "422" not in responses, where  # invalid input is a 400 here
            if "{" in path:
                assert "404" in responses, where
            success = [code for code in responses if code.startswith("2")]
            assert len(success) == 1 and responses[success[0]].get("content"), where
    creating = document["paths"]["/agents/{agent_id}/threads"]["post"]
    assert {p["name"] for p in creating["parameters"]} >= {"Idempotency-Key"}
    assert "agent_not_published" in creating["responses"]["409"]["description"]
    assert "readiness_blocked" in creating["responses"]["409"]["description"]
    assert "413" in document["paths"]["/agents/{agent_id}/files"]["post"]["responses"]
    upload_body = document["paths"]["/agents/{agent_id}/files"]["post"]["requestBody"]["content"]
    assert upload_body["multipart/form-data"]["schema"]["properties"]["file"]["format"] == "binary"


def test_interactive_docs_are_served(client: TestClient, owner: ApiOwner) -> None:
    response = client.get("/api/v1/docs")
    assert response.status_code == 200 and "swagger" in response.text.lower()
    assert "/api/v1/openapi.json" in response.text


def test_downloads_and_streams_document_what_they_send(client: TestClient) -> None:
    document = client.get("/api/v1/openapi.json").json()
    assert {"HTTPValidationError", "ValidationError"}.isdisjoint(document["components"]["schemas"])
    download = document["paths"]["/files/{file_id}/content"]["get"]["responses"]["200"]
    assert set(download["content"]) == {
        "application/octet-stream",
        "*/*",
    }  # the stored media type, whatever it is
    assert {name for name, header in download["headers"].items() if header["required"]} == {
        "Content-Disposition",
        "Content-Length",
        "X-Content-Type-Options",
        "Cache-Control",
    }
    stream = document["paths"]["/threads/{thread_id}/events/stream"]["get"]["responses"]["200"]
    assert set(stream["content"]) == {"text/event-stream"}
    event = stream["content"]["text/event-stream"][
        "schema"
    ]  # one event: its fields, `data` an Event as JSON
    assert event["required"] == ["id", "event", "data"]
    assert event["properties"]["data"]["contentSchema"] == {"$ref": "#/components/schemas/Event"}


def test_downloads_answer_with_the_stored_media_type_and_the_documented_headers(
    client: TestClient, owner: ApiOwner
) -> None:
    documented = client.get("/api/v1/openapi.json").json()["paths"]["/files/{file_id}/content"][
        "get"
    ]
    headers = documented["responses"]["200"]["headers"]
    uploaded = client.post(
        f"/api/v1/agents/{owner.agent_id}/files",
        headers=owner.headers,
        files={"file": ("notes.md", "caf\u00e9".encode("latin-1"), "text/markdown")},
    ).json()
    response = client.get(f"/api/v1/files/{uploaded['id']}/content", headers=owner.headers)
    assert response.status_code == 200
    assert (
        response.headers["content-type"] == "text/markdown"
    )  # no charset claimed for bytes never decoded
    assert response.headers["content-length"] == str(uploaded["size"])
    for name in ("X-Content-Type-Options", "Cache-Control"):
        assert response.headers[name] == headers[name]["schema"]["const"], name
    assert re.match(
        headers["Content-Disposition"]["schema"]["pattern"], response.headers["content-disposition"]
    )


def test_another_method_is_a_405_naming_every_method_of_the_path(
    client: TestClient, owner: ApiOwner
) -> None:
    for method, path, allowed in (
        ("PATCH", "/threads/some-id", "DELETE, GET"),
        ("OPTIONS", "/threads/some-id/events", "GET, POST"),
        ("PUT", "/agents/some-id/threads", "GET, POST"),
    ):
        response = client.request(method, f"/api/v1{path}", headers=owner.headers)
        assert response.status_code == 405, (method, path)
        assert response.headers["allow"] == allowed, (method, path)
        assert response.json()["error"]["code"] == "method_not_allowed"
