#!/bin/bash
kubectl get pod web
