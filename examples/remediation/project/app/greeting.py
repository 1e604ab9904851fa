"""The demo service: greets users with an operator-configurable template."""

import tinytemplate


class User:
    def __init__(self, name, plan):
        self.name = name
        self.plan = plan


def greet(template, user):
    return tinytemplate.render(template, user=user)
