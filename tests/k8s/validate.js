#!/usr/bin/env node
// Checks Kubernetes manifests (a YAML file of several documents) against the Kubernetes API's
// schemas: kubernetes-models' validators, compiled by ajv from the API's OpenAPI schema (1.33,
// which has Indexed Jobs). Prints the documents as a JSON array when every one is valid (exit 0);
// otherwise each error, naming the document (exit 1).
//
//   node tests/k8s/validate.js MANIFESTS.yaml
'use strict';
const fs = require('fs');
const YAML = require('yaml');
const { Job } = require('kubernetes-models/batch/v1');
const { Service, Secret, ConfigMap, Pod } = require('kubernetes-models/v1');
const { Deployment } = require('kubernetes-models/apps/v1');

const MODELS = {
  'batch/v1/Job': Job,
  'v1/Service': Service,
  'v1/Secret': Secret,
  'v1/ConfigMap': ConfigMap,
  'v1/Pod': Pod,
  'apps/v1/Deployment': Deployment,
};

function main() {
  const file = process.argv[2];
  if (!file) {
    console.error('usage: validate.js MANIFESTS.yaml');
    return 2;
  }
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'));
  const out = [];
  let errors = 0;
  docs.forEach((doc, i) => {
    if (doc.errors.length) {
      doc.errors.forEach((e) => console.error(`document ${i}: YAML: ${e.message}`));
      errors += doc.errors.length;
      return;
    }
    const obj = doc.toJS();
    const where = `document ${i} (${obj && obj.kind} ${obj && obj.metadata && obj.metadata.name})`;
    const Model = obj && MODELS[`${obj.apiVersion}/${obj.kind}`];
    if (!Model) {
      console.error(`${where}: no schema for ${obj && obj.apiVersion}/${obj && obj.kind}`);
      errors += 1;
      return;
    }
    try {
      new Model(obj).validate();
    } catch (e) {
      console.error(`${where}: ${e.message}`);
      errors += 1;
      return;
    }
    out.push(obj);
  });
  if (errors) return 1;
  process.stdout.write(JSON.stringify(out) + '\n');
  return 0;
}

process.exitCode = main();
