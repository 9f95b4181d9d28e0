import { describe, expect, it } from 'vitest';
import { endpointProblem, hubEndpoint, tokenAllowed } from '../../src/huggingface/endpoint.ts';
import { parseHubURI, repoProblem, revisionProblem } from '../../src/api/hub-reference.ts';

describe('Hub references', () => {
  it('parses hf://namespace/name with and without a revision', () => {
    expect(parseHubURI('hf://meta-llama/Llama-3.1-8B-Instruct')).toEqual({
      repo: 'meta-llama/Llama-3.1-8B-Instruct',
      revision: 'main',
    });
    expect(parseHubURI('hf://org/m@v1.0')).toEqual({ repo: 'org/m', revision: 'v1.0' });
    expect(parseHubURI('hf://org/m@refs/pr/1')).toEqual({ repo: 'org/m', revision: 'refs/pr/1' });
    expect(parseHubURI(`hf://org/m@${'a'.repeat(40)}`).revision).toBe('a'.repeat(40));
  });

  it('refuses what the Hub would not name, saying how to write it', () => {
    expect(() => parseHubURI('s3://org/m')).toThrow(/write hf:\/\/namespace\/name/);
    expect(() => parseHubURI('hf://m')).toThrow(/must be namespace\/name/);
    expect(() => parseHubURI('hf://org/m@')).toThrow(/revision must be 1 to 256/);
    expect(repoProblem('org/a--b')).toBeDefined();
    expect(repoProblem('org/-a')).toBeDefined();
    expect(repoProblem('org/a/b')).toBeDefined();
    expect(repoProblem('Org_1/model.v2')).toBeUndefined();
    expect(revisionProblem('main branch')).toBeDefined();
    expect(revisionProblem('a..b')).toBeDefined();
  });

  it('takes the Hub root as an endpoint and allows a token only to its listed hosts', () => {
    expect(endpointProblem('https://hub.example.com/api')).toMatch(/root URL/);
    expect(endpointProblem('https://user:pw@hub.example.com')).toMatch(/credentials/);
    expect(endpointProblem('https://hub.example.com/')).toBeUndefined();
    expect(tokenAllowed(hubEndpoint())).toBe(true);
    expect(tokenAllowed(hubEndpoint('https://hf-mirror.example.com'))).toBe(false);
    expect(tokenAllowed(hubEndpoint('https://hf-mirror.example.com', '*.example.com'))).toBe(true);
    expect(tokenAllowed(hubEndpoint('https://huggingface.co', ''))).toBe(false);
    // The scheme too: the public Hub over plain HTTP is not the allowed huggingface.co.
    expect(tokenAllowed(hubEndpoint('http://huggingface.co'))).toBe(false);
    expect(tokenAllowed(hubEndpoint('http://mirror.internal:8080', 'mirror.internal'))).toBe(false);
    expect(tokenAllowed(hubEndpoint('http://mirror.internal:8080', 'http://mirror.internal'))).toBe(true);
  });
});
