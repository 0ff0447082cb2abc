#!/bin/bash

stat ~/first-file
