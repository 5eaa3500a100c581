"""The offline default classifier's head: ImageNet-1k classes folded onto the 11 Food-11 classes.

A Food-11 logit is the log of the summed ImageNet probability of its ImageNet classes (a
log-sum-exp over them), so the softmax over the 11 outputs is the ImageNet probability mass on
food, renormalised over Food-11. ImageNet-1k has no class for eggs, fried food or rice: those three
get a fixed floor far below every covered class and can never be predicted. Dairy product is
covered by eggnog alone.
"""

from __future__ import annotations

import torch
from torch import nn

from pipeline_src.steps.labels import FOOD11_CLASSES

# Food-11 class -> {ImageNet-1k index: ImageNet class name}. Names are checked against torchvision's list.
IMAGENET_TO_FOOD11: dict[str, dict[int, str]] = {
    "Bread": {930: "French loaf", 931: "bagel", 932: "pretzel", 961: "dough", 963: "pizza"},
    "Dairy product": {969: "eggnog"},
    "Dessert": {927: "trifle", 928: "ice cream", 929: "ice lolly", 960: "chocolate sauce"},
    "Egg": {},
    "Fried food": {},
    "Meat": {933: "cheeseburger", 934: "hotdog", 962: "meat loaf", 965: "burrito"},
    "Noodles/Pasta": {959: "carbonara"},
    "Rice": {},
    "Seafood": {
        118: "Dungeness crab",
        119: "rock crab",
        121: "king crab",
        122: "American lobster",
        123: "spiny lobster",
        124: "crayfish",
    },
    "Soup": {925: "consomme", 926: "hot pot"},
    "Vegetable/Fruit": {
        924: "guacamole",
        935: "mashed potato",
        936: "head cabbage",
        937: "broccoli",
        938: "cauliflower",
        939: "zucchini",
        940: "spaghetti squash",
        941: "acorn squash",
        942: "butternut squash",
        943: "cucumber",
        944: "artichoke",
        945: "bell pepper",
        946: "cardoon",
        947: "mushroom",
        948: "Granny Smith",
        949: "strawberry",
        950: "orange",
        951: "lemon",
        952: "fig",
        953: "pineapple",
        954: "banana",
        955: "jackfruit",
        956: "custard apple",
        957: "pomegranate",
        987: "corn",
        998: "ear",
    },
}
UNCOVERED_CLASSES = tuple(name for name in FOOD11_CLASSES if not IMAGENET_TO_FOOD11[name])
# log(1e-30): an uncovered class sits about 69 nats below the whole food mass.
UNCOVERED_FLOOR = 1e-30


def membership_matrix() -> torch.Tensor:
    """[1000, 11] matrix with a 1 where an ImageNet class belongs to a Food-11 class."""
    matrix = torch.zeros(1000, len(FOOD11_CLASSES))
    for column, name in enumerate(FOOD11_CLASSES):
        for imagenet_index in IMAGENET_TO_FOOD11[name]:
            matrix[imagenet_index, column] = 1.0
    return matrix


class ImageNetToFood11(nn.Module):
    """ImageNet logits [B, 1000] -> Food-11 logits [B, 11]."""

    membership: torch.Tensor  # a buffer: exported with the graph, moved with the module

    def __init__(self):
        super().__init__()
        self.register_buffer("membership", membership_matrix())

    def forward(self, imagenet_logits: torch.Tensor) -> torch.Tensor:
        peak = imagenet_logits.amax(dim=1, keepdim=True)
        food_mass = torch.exp(imagenet_logits - peak) @ self.membership
        return torch.log(food_mass.clamp_min(UNCOVERED_FLOOR)) + peak
