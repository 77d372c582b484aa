// Package license verifies the signed license that unlocks the ServiceMesh.
//
// The mesh is a licensed preview: the operator acts only when a license
// signed by a trusted Ed25519 key is present, currently valid, and grants
// the service-mesh or preview feature. Anything else leaves the
// ServiceMesh PreviewLocked with one of the Reason constants and a message
// a user can act on.
//
// # File format
//
// A license file is a JSON envelope:
//
//	{
//	  "version": 1,
//	  "payload": "<standard base64 of the document bytes>",
//	  "signature": "<standard base64 of the Ed25519 signature over those bytes>"
//	}
//
// The document is JSON too:
//
//	{
//	  "version": 1,
//	  "id": "lic-2026-0042",
//	  "licensee": "Example Corp",
//	  "features": ["service-mesh"],
//	  "issuedAt": "2026-01-01T00:00:00Z",
//	  "notBefore": "2026-01-01T00:00:00Z",
//	  "notAfter": "2027-01-01T00:00:00Z"
//	}
//
// The signature covers the exact payload bytes, so the document is never
// re-serialised before checking it, and nothing in it is interpreted until
// the signature holds. The envelope repeats the version so a future format
// can be recognised (and reported as "upgrade the operator") before any
// signature check. The signed document carries the version again, and both
// must be one this operator reads, so the unsigned copy cannot change how a
// document is interpreted.
//
// # Keys
//
// Release builds trust only the public key compiled into this package.
// Builds made with the licensetestkey build tag also trust one key passed
// at run time (see KeyOptions), which is how tests and the local e2e mint
// their own licenses; a release build cannot enable that path.
//
// This package makes no Kubernetes API calls: the caller fetches the Secret
// and hands its data to SecretRef.Verify.
package license
