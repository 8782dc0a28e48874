# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: monitoring_bundle
short_description: Scrape jobs, alert rules and the Grafana dashboard of role monitoring
version_added: 0.1.0
author: gpufleet maintainers (@gpufleet)
description:
  - From the role's settings, renders everything the role ships, from one list of alerts and one list of dashboard
    panels, with one job name per component whichever way Prometheus scrapes it.
  - Returns only C(errors) when a setting is wrong (each naming the variable, the value and what is allowed).
options:
  _input:
    description:
      - Dict with C(scheduler_job), C(controllers_job), C(monitor_job), C(volcano_namespace), C(scheduler_service),
        C(controllers_service), C(plugin_namespace), C(plugin_pod_label) ([name, value]), C(dashboard_namespace),
        C(dashboard_uid), C(dashboard_title), C(scrape_interval), C(rule_interval), C(thresholds) (down, pending,
        gang, gpu_missing - Prometheus durations), C(alert_labels) and C(gpu_nodes) (node name to expected GPUs).
    type: dict
    required: true
  labels:
    description: Labels put on the Prometheus Operator resources (for its C(serviceMonitorSelector), C(ruleSelector)).
    type: dict
    default: {}
  dashboard_labels:
    description: Labels of the dashboard ConfigMap (the Grafana sidecar's label).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Render the monitoring
  ansible.builtin.set_fact:
    bundle: "{{ settings | gpufleet.vgpu.monitoring_bundle({'release': 'kube-prometheus-stack'}) }}"
"""

RETURN = r"""
_value:
  description:
    - C(errors); when empty also C(scrape_configs) (a list of Prometheus scrape_configs entries), C(rules) (a rules
      file), C(dashboard) (Grafana JSON model), C(operator) (ServiceMonitors, PodMonitor, PrometheusRule),
      C(dashboard_configmap), C(alerts) (alert names) and C(queries) (the dashboard's expressions).
  type: dict
"""

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _gpu_hosts
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _monitoring


def monitoring_bundle(settings, labels=None, dashboard_labels=None):
    return _monitoring.bundle(settings, labels, dashboard_labels)


def monitoring_expected_gpus(hosts, hostvars):
    return _gpu_hosts.expected_counts(hosts, hostvars)


class FilterModule:
    def filters(self):
        return {"monitoring_bundle": monitoring_bundle, "monitoring_expected_gpus": monitoring_expected_gpus}
