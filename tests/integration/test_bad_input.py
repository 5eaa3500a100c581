"""Bad input, as a table: every case sent straight to Triton over gRPC and through the API, against the
real servers. A refused photo gets INVALID_ARG / HTTP 400 naming the step, the image and the reason; an
odd but valid photo gets a real result; either way the next good request is served."""

import base64
import io
import socket

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from helpers import APPLE, encode, gradient, png_header_only, post_photo
from PIL import Image
from tritonclient.utils import InferenceServerException

from food11_client import InvalidImageError
from pipeline_src.steps.labels import FOOD11_CLASSES


def animated_gif() -> bytes:
    frames = [Image.new("RGB", (32, 32), color) for color in ((200, 40, 40), (40, 40, 200))]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    return buffer.getvalue()


def sixteen_bit_png() -> bytes:
    return encode(Image.fromarray(np.linspace(0, 60000, 64 * 48).astype(np.uint16).reshape(48, 64)), "PNG")


# Refused: not an image this pipeline reads, or one too large to decode safely. The reason is the
# preprocess step's own words, the same through gRPC and the API.
REFUSED = {
    "empty body": (b"", "empty image: the request carried zero bytes"),
    "random bytes": (np.random.default_rng(7).bytes(4096), "cannot decode: not a JPEG, PNG, WebP, BMP or GIF"),
    "truncated JPEG": (APPLE[: len(APPLE) // 2], "cannot decode JPEG image"),
    "text renamed .jpg": (b"Dear diary, today I ate an apple.\n", "cannot decode: not a JPEG, PNG, WebP, BMP or GIF"),
    # 400 megapixels announced by a 100-byte file: refused from the header, never decoded.
    "20000x20000 PNG": (png_header_only(20000, 20000), "decompression bomb"),
    "SVG": (
        b'<svg xmlns="http://www.w3.org/2000/svg" width="9" height="9"><rect width="9" height="9"/></svg>',
        "cannot decode: not a JPEG, PNG, WebP, BMP or GIF",
    ),
    "TIFF": (encode(gradient(), "TIFF"), "cannot decode: not a JPEG, PNG, WebP, BMP or GIF"),
    # Pillow 12.0.0's EPS parser loops forever on this header: no parser but the accepted ones may run.
    "looping EPS": (
        b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n%%EndComments\n%filler\n%%BeginBinary: -19\n%%EOF\n",
        "cannot decode: not a JPEG, PNG, WebP, BMP or GIF",
    ),
    # Pillow reads no HEIC here (no plugin): an ISO-BMFF 'ftyp heic' header, as an iPhone writes.
    "HEIC": (
        b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + bytes(200),
        "cannot decode: not a JPEG, PNG, WebP, BMP or GIF",
    ),
}

# Accepted: odd but valid photos a phone, an editor or a scanner produces. Each becomes RGB (alpha onto
# white, 16 bits scaled, first GIF frame) and gets a real label, probability and caption.
ACCEPTED = {
    "1x1 image": encode(Image.new("RGB", (1, 1), (200, 30, 30)), "PNG"),
    "16-bit PNG": sixteen_bit_png(),
    "CMYK JPEG": encode(gradient().convert("CMYK"), "JPEG"),
    "grayscale JPEG": encode(gradient().convert("L"), "JPEG"),
    "RGBA PNG": encode(gradient().convert("RGBA"), "PNG"),
    "palette PNG": encode(gradient().convert("P"), "PNG"),
    "animated GIF": animated_gif(),
}


def assert_a_real_result(label, probability, caption_status):
    assert label in FOOD11_CLASSES
    assert 0 < probability <= 1
    assert caption_status in ("ok", "low_confidence")


@pytest.mark.parametrize("case", REFUSED)
def test_refused_over_grpc_with_invalid_arg_naming_step_image_and_reason(client, case):
    data, reason = REFUSED[case]
    with pytest.raises(InvalidImageError, match=reason) as caught:
        client.caption([APPLE, data])
    assert caught.value.status == "StatusCode.INVALID_ARGUMENT"
    assert "preprocess: image 2 of 2" in str(caught.value)
    (result,) = client.caption([APPLE])
    assert result.label == "Vegetable/Fruit"


@pytest.mark.parametrize("case", REFUSED)
def test_refused_through_the_api_with_400_and_the_pipelines_reason(api, case):
    data, reason = REFUSED[case]
    response = post_photo(api.url, data)
    assert response.status_code == 400
    body = response.json()
    assert reason in body["detail"] and "preprocess: image 1 of 1" in body["detail"]
    assert body["request_id"] == response.headers["x-request-id"]
    assert post_photo(api.url, APPLE).status_code == 200


@pytest.mark.parametrize("case", ACCEPTED)
def test_odd_but_valid_photos_get_a_result_over_grpc(client, case):
    (result,) = client.caption([ACCEPTED[case]])
    assert_a_real_result(result.label, result.probability, result.caption_status)


@pytest.mark.parametrize("case", ["CMYK JPEG", "animated GIF", "16-bit PNG"])
def test_odd_but_valid_photos_get_a_result_through_the_api(api, case):
    response = post_photo(api.url, ACCEPTED[case], content_type="application/octet-stream")
    assert response.status_code == 200
    body = response.json()
    assert_a_real_result(body["label"], body["probability"], body["caption_status"])


def test_exif_rotated_jpeg_gets_the_label_and_probability_of_the_upright_photo(client):
    """A phone stores the sensor's pixels and an EXIF tag saying how to turn them: the pipeline turns
    them first, so the rotated file is the same photo."""
    upright = Image.open(io.BytesIO(APPLE))
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees clockwise to display"
    stored_sideways = encode(upright.transpose(Image.Transpose.ROTATE_90), "JPEG", quality=95, exif=exif.tobytes())
    as_upright = encode(upright, "JPEG", quality=95)
    rotated, reference = client.caption([stored_sideways, as_upright])
    assert rotated.label == reference.label
    assert rotated.probability == pytest.approx(reference.probability, abs=0.02)  # JPEG re-encoding differs
    sideways_without_exif = encode(upright.transpose(Image.Transpose.ROTATE_90), "JPEG", quality=95)
    (unturned,) = client.caption([sideways_without_exif])
    # Control: the same pixels without the tag are a different input to the classifier.
    assert abs(unturned.probability - reference.probability) > abs(rotated.probability - reference.probability)


def infer_raw(triton_grpc, model, name, array, dtype):
    tensor = grpcclient.InferInput(name, list(array.shape), dtype)
    tensor.set_data_from_numpy(array)
    return triton_grpc.infer(model, [tensor])


def image_batch(count: int) -> np.ndarray:
    return np.array([[APPLE]] * count, dtype=np.object_)


@pytest.mark.parametrize(
    "model, name, array, dtype, reason",
    [
        (
            "food11_pipeline",
            "IMAGE",
            np.zeros((1, 1), dtype=np.float32),
            "FP32",
            "inference input 'IMAGE' data-type is 'FP32', but model 'food11_pipeline' expects 'BYTES'",
        ),
        (
            "food11_pipeline",
            "IMAGE",
            np.array([[APPLE, APPLE]], dtype=np.object_),
            "BYTES",
            "unexpected shape for input 'IMAGE' for model 'food11_pipeline'. Expected \\[-1,1\\], got \\[1,2\\]",
        ),
        ("food11_pipeline", "IMAGE", image_batch(33), "BYTES", "batch-size must be <= 32"),
        ("food11_pipeline", "PHOTO", image_batch(1), "BYTES", "unexpected inference input 'PHOTO'"),
        ("food11_pipelin", "IMAGE", image_batch(1), "BYTES", "food11_pipelin"),
    ],
)
def test_malformed_grpc_request_is_refused_by_triton_and_the_next_is_served(
    triton_grpc, client, model, name, array, dtype, reason
):
    with pytest.raises(InferenceServerException, match=reason) as caught:
        infer_raw(triton_grpc, model, name, array, dtype)
    expected = "StatusCode.NOT_FOUND" if model != "food11_pipeline" else "StatusCode.INVALID_ARGUMENT"
    assert caught.value.status() == expected
    (result,) = client.caption([APPLE])
    assert result.label == "Vegetable/Fruit"


@pytest.mark.parametrize(
    "request_kwargs",
    [
        {"json": {"image": "%%% not base64 %%%"}},
        {"json": {"picture": "aGVsbG8="}},
        {"content": b"{not json", "headers": {"content-type": "application/json"}},
        {"content": base64.b64encode(APPLE), "headers": {"content-type": "text/plain"}},  # wrong content type
    ],
)
def test_malformed_predict_body_is_422(api, request_kwargs):
    response = httpx.post(f"{api.url}/predict", timeout=30, **request_kwargs)
    assert response.status_code == 422


@pytest.mark.parametrize(
    "request_kwargs",
    [
        {"data": {"other": "x"}},  # a form without the photo field
        {"content": APPLE, "headers": {"content-type": "image/jpeg"}},  # the photo as the raw body: wrong content type
    ],
)
def test_caption_without_a_photo_field_is_422(api, request_kwargs):
    response = httpx.post(f"{api.url}/caption", timeout=30, **request_kwargs)
    assert response.status_code == 422
    assert "photo" in response.text


def test_body_over_the_limit_is_413_before_it_is_sent(api):
    """Headers announce 100 MB; the API answers 413 without waiting for (or reading) the body."""
    with socket.create_connection(("127.0.0.1", api.port), timeout=30) as connection:
        connection.sendall(
            b"POST /caption HTTP/1.1\r\nHost: test\r\nContent-Type: multipart/form-data; boundary=x\r\n"
            b"Content-Length: 100000000\r\n\r\n--x\r\n"
        )
        reply = connection.recv(65536).decode("latin-1")
    assert reply.startswith("HTTP/1.1 413")
    assert "upload limit" in reply
    assert reply.lower().count("x-request-id:") == 1


def test_chunked_body_over_the_limit_is_413(api):
    def chunks():
        for _ in range(40):
            yield b"\0" * 100_000  # 4 MB against a 2 MB limit, no Content-Length

    response = httpx.post(
        f"{api.url}/caption", content=chunks(), timeout=30, headers={"content-type": "multipart/form-data; boundary=x"}
    )
    assert response.status_code == 413
    assert post_photo(api.url, APPLE).status_code == 200
