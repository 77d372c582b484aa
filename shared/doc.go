// Package shared is the contract between the fleet operator and the mesh
// operator: label and annotation keys, policy builders and helpers that both
// use. Neither operator imports the other; they meet only here.
package shared
