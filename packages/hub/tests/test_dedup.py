from trajectoryhub import ContentStore, content_hash, dedup


def test_hash_ignores_ids_timing_and_rewards(traj):
    a = traj("id-1", "t", reward=0.1)
    b = traj("id-2", "t", reward=0.9).model_copy(update={"metadata": {"started_at": 5}})
    assert content_hash(a) == content_hash(b)
    assert content_hash(a) != content_hash(traj("id-3", "t", steps=2))
    assert content_hash(a) != content_hash(traj("id-4", "other"))


def test_dedup_keeps_first(traj):
    items = [traj("a", "t"), traj("b", "t"), traj("c", "u")]
    assert [t.id for t in dedup(items)] == ["a", "c"]


def test_store_round_trip(traj, tmp_path):
    store = ContentStore(tmp_path / "cas")
    key, new = store.put(traj("a", "t"))
    assert new and key in store and len(store) == 1
    assert store.put(traj("b", "t")) == (key, False)
    assert store.get(key).id == "a"
    assert list(ContentStore(tmp_path / "cas")) == [key]
    assert not list((tmp_path / "cas").rglob("*.tmp"))
