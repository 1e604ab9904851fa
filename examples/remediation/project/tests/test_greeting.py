from app.greeting import User, greet


def test_greets_by_name():
    assert greet("Hello {{ user.name }}!", User("Ada", "pro")) == "Hello Ada!"


def test_mentions_plan():
    assert greet("{{ user.name }} is on {{ user.plan }}", User("Bo", "free")) == "Bo is on free"
