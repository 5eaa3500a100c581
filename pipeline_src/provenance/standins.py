"""What the offline defaults' stand-ins say beside every answer they take part in, in the words a user reads
(the build writes them into the manifests; Swagger's examples show them)."""

CLASSIFIER_STANDIN_WARNING = (
    "classifier: ImageNet EfficientNet-Lite0 with a fixed ImageNet-to-Food-11 head, never "
    "trained on Food-11: its labels are approximate"
)
BLIP_STANDIN_WARNING = (
    "captioner: a BLIP stand-in with random weights: its captions are meaningless words "
    "(real weights: make serve BLIP=Salesforce/blip-image-captioning-base, docs/models.md)"
)
