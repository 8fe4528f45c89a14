"""The OpenAPI document at /api/v1/openapi.json is valid and documents every operation fully."""

from __future__ import annotations

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
        "type": "http", "scheme": "bearer", "bearerFormat": "mst_…",
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
