import pytest

from knowlyrcore.toolgen import PHRASINGS, TRAIN_PHRASINGS, generate_library, query_pairs, unseen_services


@pytest.fixture(scope="module")
def library():
    return generate_library()


def test_the_library_has_over_a_thousand_valid_distinct_tools(library):
    assert len(library) == 1240
    tool = library.get("acme_crm_update_contact")
    assert tool.parameters["required"] == ["contact_id"] and "email" in tool.parameters["properties"]
    assert "Acme edition" in tool.description


def test_splits_share_no_phrasing_and_unseen_shares_no_service(library):
    train = query_pairs(library, "train", n=400, seed=0)
    test = query_pairs(library, "test", n=400, seed=0)
    unseen = query_pairs(library, "test-unseen", n=400, seed=0)
    held_out = unseen_services()
    service_of = lambda name: name.split("_")[1] if name.split("_")[0] in ("acme",) else name.split("_")[0]  # noqa: E731
    assert not {service_of(t) for _, t in train} & held_out
    assert {service_of(t) for _, t in unseen} <= held_out
    assert all(t in library for _, t in train + test + unseen)

    def template_of(query):
        for action, phrasings in PHRASINGS.items():
            for i, phrasing in enumerate(phrasings):
                head = phrasing.split("{")[0]
                if head and query.startswith(head):
                    return action, i
        return None

    assert {template_of(q)[1] for q, _ in train if template_of(q)} <= set(range(TRAIN_PHRASINGS))
    assert all(i >= TRAIN_PHRASINGS for q, _ in test if (found := template_of(q)) for i in [found[1]])


def test_pairs_are_reproducible_and_splits_checked(library):
    assert query_pairs(library, "test", n=5, seed=3) == query_pairs(library, "test", n=5, seed=3)
    assert query_pairs(library, "test", n=5, seed=3) != query_pairs(library, "test", n=5, seed=4)
    with pytest.raises(ValueError, match="unknown split"):
        query_pairs(library, "dev", n=1)
    with pytest.raises(ValueError, match="n_vendors"):
        generate_library(99)


def test_bm25_finds_most_held_out_tools(library):
    # a floor, not a tuning target: the phrasings of `test` were never used to build anything
    pairs = query_pairs(library, "test", n=200, seed=0)
    recall = sum(tool in [t.name for t, _ in library.search(q, k=5)] for q, tool in pairs) / len(pairs)
    assert recall > 0.5
