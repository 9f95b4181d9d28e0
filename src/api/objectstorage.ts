/**
 * Where a model archive lives in object storage. The same fields (and the same Secret keys) are used by the
 * plugin's configuration file (src/check/plugin-config.ts reads it as the plugin does), so an admin can copy values from one to the other.
 */
import { z } from 'zod';
import { BaseURL, SecretRef, distinct, durationBetween, withRules, type CelRule } from './common.ts';
import { DirectoryPrefix, HAS_SELECTION_CEL, hasSelection, selectionFields } from './fileset.ts';
import { ObjectKey } from './objectkey.ts';

export const OBJECT_STORAGE_TYPES = ['s3', 'oss', 'gcs', 'abs'] as const;
export type ObjectStorageType = (typeof OBJECT_STORAGE_TYPES)[number];

/** Secret keys read for each storage kind; they mirror the plugin configuration's `object_storage` fields. */
export const CREDENTIAL_KEYS: Record<ObjectStorageType, readonly string[]> = {
  s3: ['access_key', 'secret_key'],
  oss: ['access_key_id', 'access_key_secret'],
  gcs: ['service_account.json'],
  abs: ['account_key'],
};

const BucketName = z
  .string()
  .min(1)
  .max(255)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'must be a bucket name');

/** Query parameter names left out of a task id (a preheat's or the plugin's filter): one name each, no separator. */
export const FilteredQueryParams = z
  .array(
    z
      .string()
      .min(1)
      .max(128)
      .regex(/^[^&,\s]+$/, 'must be one query parameter name'),
  )
  .max(64);

const locationFields = {
  type: z.enum(OBJECT_STORAGE_TYPES).meta({
    description: 'Object storage kind: s3 (and S3-compatible stores), oss, gcs or abs (Azure Blob Storage).',
  }),
  bucket: BucketName.optional().meta({ description: 'Bucket name (s3, oss, gcs).' }),
  container: BucketName.optional().meta({ description: 'Blob container name (abs).' }),
  accountName: z
    .string()
    .max(24)
    .regex(/^[a-z0-9]{3,24}$/, 'must be a storage account name')
    .optional()
    .meta({ description: 'Storage account name (abs).' }),
  region: z
    .string()
    .max(64)
    .regex(/^[a-z0-9][a-z0-9-]*$/, 'must be a region name such as eu-west-1')
    .optional()
    .meta({ description: 'Region (s3; default us-east-1).' }),
  endpoint: BaseURL.optional().meta({
    description:
      'Service endpoint. Required for oss; optional for s3 (S3-compatible stores) and abs (defaults to https://<account>.blob.core.windows.net).',
  }),
  pathStyle: z
    .boolean()
    .optional()
    .meta({ description: 's3: address the bucket in the path, not the host.' }),
  projectID: z
    .string()
    .max(64)
    .regex(/^[a-z0-9][a-z0-9.:-]*$/, 'must be a project id')
    .optional()
    .meta({ description: 'Project id (gcs).' }),
  credentialsSecretRef: SecretRef.optional().meta({
    description:
      'Secret with the credentials (required: every URL is signed): s3 access_key/secret_key; oss access_key_id/access_key_secret; gcs service_account.json; abs account_key.',
  }),
  signedURLExpiry: durationBetween('1s', '168h')
    .default('1h')
    .meta({ description: 'Validity of each signed URL, from 1s to 168h (7 days, the s3 and gcs maximum).' }),
  filteredQueryParams: FilteredQueryParams.optional().meta({
    description:
      'Query parameters left out of the task id. Default: the signature parameters of the storage kind, the same default as the endpoint plugin.',
  }),
};

type Location = z.infer<z.ZodObject<typeof locationFields>>;

const locationRules: CelRule<Location>[] = [
  {
    rule: "self.type == 'abs' || has(self.bucket)",
    message: 'bucket is required for s3, oss and gcs',
    fieldPath: '.bucket',
    reason: 'FieldValueRequired',
    check: (o) => o.type === 'abs' || o.bucket !== undefined,
  },
  {
    rule: "self.type != 'abs' || (has(self.container) && has(self.accountName))",
    message: 'container and accountName are required for abs',
    fieldPath: '.container',
    reason: 'FieldValueRequired',
    check: (o) => o.type !== 'abs' || (o.container !== undefined && o.accountName !== undefined),
  },
  {
    rule: "self.type != 'oss' || has(self.endpoint)",
    message: 'endpoint is required for oss (e.g. https://oss-cn-hangzhou.aliyuncs.com)',
    fieldPath: '.endpoint',
    reason: 'FieldValueRequired',
    check: (o) => o.type !== 'oss' || o.endpoint !== undefined,
  },
  {
    // Unsigned access to a public bucket is no use here: the plugin always signs, and a plain URL preheat covers
    // public objects (ModelPreheat spec.url). Without this rule the job fails at run time, retried forever.
    rule: 'has(self.credentialsSecretRef)',
    message:
      'credentialsSecretRef is required: the operator signs every object URL (for public objects use spec.url instead)',
    fieldPath: '.credentialsSecretRef',
    reason: 'FieldValueRequired',
    check: (o) => o.credentialsSecretRef !== undefined,
  },
];

/** An object storage bucket (or container) and how to sign URLs for it. */
export const ObjectStorageLocation = withRules(z.object(locationFields), locationRules);
export type ObjectStorageLocation = z.infer<typeof ObjectStorageLocation>;

/** A bucket plus the objects to preheat (ModelPreheat.spec.objectStorage): listed keys, or a directory. */
export const ObjectStorageSource = withRules(
  z.object({
    ...locationFields,
    keys: distinct(z.array(ObjectKey).min(1).max(100)).optional().meta({
      description:
        "Object keys to preheat, e.g. models/resnet-18.mar; the plugin's object-key rules apply (as to ServedModel fileName).",
    }),
    prefix: DirectoryPrefix.optional().meta({
      description:
        "A directory to preheat: every object under this key prefix (e.g. models/llama-3-8b/; '' is the bucket root), listed by the operator with credentialsSecretRef once per generation, chosen by include/exclude and bounded by maxFiles/maxBytes. More than 100 files are preheated in several manager jobs.",
    }),
    ...selectionFields,
  }),
  [
    ...locationRules,
    {
      rule: 'has(self.keys) != has(self.prefix)',
      message: 'set exactly one of keys (objects named one by one) and prefix (a directory)',
      fieldPath: '.keys',
      reason: 'FieldValueInvalid',
      check: (o) => (o.keys !== undefined) !== (o.prefix !== undefined),
    },
    {
      rule: `has(self.prefix) || !(${HAS_SELECTION_CEL})`,
      message:
        'include, exclude, maxFiles and maxBytes choose the files of a prefix: set prefix, or remove them',
      fieldPath: '.prefix',
      reason: 'FieldValueForbidden',
      check: (o) => o.prefix !== undefined || !hasSelection(o),
    },
  ],
);
export type ObjectStorageSource = z.infer<typeof ObjectStorageSource>;
